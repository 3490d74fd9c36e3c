//! `new Client(...)`'s options (index.d.ts `ClientOptions`) into a
//! [`flagstream::Builder`], each checked and named in its error.

use std::time::Duration;

use flagstream::{Client, FlagSet};
use napi::Result;
use napi_derive::napi;

use crate::type_error;

/// Options of `new Client(...)` (index.d.ts `ClientOptions` documents
/// each; durations in milliseconds).
#[napi(object)]
#[derive(Default)]
pub struct NativeOptions {
    pub endpoints: Option<Vec<String>>,
    pub sdk_key: Option<String>,
    pub cache_dir: Option<String>,
    pub cache_write_interval_ms: Option<f64>,
    pub keep_endpoint_order: Option<bool>,
    pub tls_ca_pem: Option<String>,
    pub tls_cert_pem: Option<String>,
    pub tls_key_pem: Option<String>,
    pub offline_file: Option<String>,
    /// The text of a YAML/JSON flag file (index.js serialises an object).
    pub test_data: Option<String>,
    pub connect_timeout_ms: Option<f64>,
    pub keepalive_interval_ms: Option<f64>,
    pub keepalive_timeout_ms: Option<f64>,
    pub tcp_user_timeout_ms: Option<f64>,
    pub first_message_timeout_ms: Option<f64>,
    pub heartbeat_default_ms: Option<f64>,
    pub watchdog_misses: Option<u32>,
    pub backoff_base_ms: Option<f64>,
    pub backoff_cap_ms: Option<f64>,
    pub healthy_after_ms: Option<f64>,
    pub stall_jitter_ms: Option<f64>,
    pub stale_after_ms: Option<f64>,
    pub usage_reports: Option<bool>,
    pub usage_interval_ms: Option<f64>,
}

/// A flag set from the text of a flag file (YAML or JSON; text keeps
/// 64-bit integers exact, which JS numbers do not).
pub(crate) fn flag_set(what: &str, text: &str) -> Result<FlagSet> {
    serde_yaml_ng::from_str(text).map_err(|e| type_error(format!("{what}: {e}")))
}

pub(crate) fn ms(name: &str, v: f64) -> Result<Duration> {
    if !v.is_finite() || v < 0.0 {
        return Err(type_error(format!("{name} must be a non-negative number of milliseconds, not {v}")));
    }
    Ok(Duration::from_secs_f64(v / 1000.0))
}

pub(crate) fn builder(o: NativeOptions) -> Result<flagstream::Builder> {
    let mut b = Client::builder();
    if let Some(e) = o.endpoints {
        b = b.endpoints(e);
    }
    if let Some(k) = o.sdk_key {
        b = b.sdk_key(k);
    }
    if let Some(d) = o.cache_dir {
        b = b.cache_dir(d);
    }
    if o.keep_endpoint_order == Some(true) {
        b = b.keep_endpoint_order();
    }
    if let Some(pem) = o.tls_ca_pem {
        b = b.tls_ca_pem(pem);
    }
    match (o.tls_cert_pem, o.tls_key_pem) {
        (Some(cert), Some(key)) => b = b.tls_identity_pem(cert, key),
        (None, None) => {}
        _ => return Err(type_error("tlsCertPem and tlsKeyPem go together")),
    }
    if let Some(f) = o.offline_file {
        b = b.offline_file(f);
    }
    if let Some(set) = o.test_data {
        b = b.test_data(flag_set("testData", &set)?);
    }
    macro_rules! durations {
        ($($field:ident => $setter:ident),* $(,)?) => {$(
            if let Some(v) = o.$field {
                b = b.$setter(ms(stringify!($field), v)?);
            }
        )*};
    }
    durations!(
        cache_write_interval_ms => cache_write_interval,
        connect_timeout_ms => connect_timeout,
        keepalive_interval_ms => keepalive_interval,
        keepalive_timeout_ms => keepalive_timeout,
        tcp_user_timeout_ms => tcp_user_timeout,
        first_message_timeout_ms => first_message_timeout,
        heartbeat_default_ms => heartbeat_default,
        backoff_base_ms => backoff_base,
        backoff_cap_ms => backoff_cap,
        healthy_after_ms => healthy_after,
        stall_jitter_ms => stall_jitter,
        stale_after_ms => stale_after,
        usage_interval_ms => usage_interval,
    );
    if let Some(on) = o.usage_reports {
        b = b.usage_reports(on);
    }
    if let Some(n) = o.watchdog_misses {
        b = b.watchdog_misses(n);
    }
    Ok(b)
}
