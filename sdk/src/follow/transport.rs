//! The connection: a new channel per attempt with the transport settings
//! of PROTOCOL.md §2.8 (TCP_USER_TIMEOUT, HTTP/2 keepalive, TLS), and errors
//! with their causes on one line.

use hyper_util::client::legacy::connect::HttpConnector;
use tonic::transport::{Channel, Endpoint};

use super::config::FollowConfig;

/// A new channel to `endpoint` with the transport settings of `cfg`
/// (never a reused one: PROTOCOL.md §2.8 step 7).
pub async fn connect(cfg: &FollowConfig, endpoint: &str) -> Result<Channel, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(cfg.connect_timeout));
    http.set_keepalive(Some(cfg.keepalive_interval));
    http.set_tcp_user_timeout(Some(cfg.tcp_user_timeout));
    let mut ep = Endpoint::from_shared(endpoint.to_owned())
        .map_err(|e| format!("invalid endpoint: {e}"))?
        .connect_timeout(cfg.connect_timeout)
        .http2_keep_alive_interval(cfg.keepalive_interval)
        .keep_alive_timeout(cfg.keepalive_timeout)
        .keep_alive_while_idle(true);
    if endpoint.starts_with("https://") {
        ep =
            ep.tls_config(cfg.tls.config()).map_err(|e| format!("TLS configuration: {}", error_chain(&e)))?;
    }
    match tokio::time::timeout(cfg.connect_timeout, ep.connect_with_connector(http)).await {
        Ok(Ok(ch)) => Ok(ch),
        Ok(Err(e)) => Err(format!("connect failed: {}", error_chain(&e))),
        Err(_) => Err(format!("connect timed out after {:?}", cfg.connect_timeout)),
    }
}

/// An error and its causes, on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
