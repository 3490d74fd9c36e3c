//! `flagstream-relay probe`: a gRPC health check for container and
//! Kubernetes probes (a minimal image has no curl or grpc_health_probe).

use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::config::ProbeArgs;

/// Whether the relay at `args.addr` answers SERVING for `args.service`
/// within the timeout; prints the outcome.
pub(crate) async fn probe(args: &ProbeArgs) -> bool {
    match check(args).await {
        Ok(ServingStatus::Serving) => {
            println!("{} {:?}: SERVING", args.addr, args.service);
            true
        }
        Ok(status) => {
            println!("{} {:?}: {}", args.addr, args.service, status.as_str_name());
            args.live
        }
        Err(e) => {
            println!("{} {:?}: {e}", args.addr, args.service);
            false
        }
    }
}

async fn check(args: &ProbeArgs) -> Result<ServingStatus, String> {
    let mut ep = tonic::transport::Endpoint::from_shared(args.addr.clone())
        .map_err(|e| format!("bad address: {e}"))?
        .connect_timeout(args.timeout.0)
        .timeout(args.timeout.0);
    if args.addr.starts_with("https://") {
        let mut tls = tonic::transport::ClientTlsConfig::new().with_webpki_roots();
        if let Some(ca) = &args.ca {
            let pem = std::fs::read(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
            tls = tls.ca_certificate(tonic::transport::Certificate::from_pem(pem));
        }
        if let (Some(cert), Some(key)) = (&args.client_cert, &args.client_key) {
            let read = |p: &std::path::PathBuf| std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()));
            tls = tls.identity(tonic::transport::Identity::from_pem(read(cert)?, read(key)?));
        }
        ep = ep.tls_config(tls).map_err(|e| format!("TLS: {e}"))?;
    }
    let channel = ep.connect().await.map_err(|e| format!("connect: {e}"))?;
    let r = HealthClient::new(channel)
        .check(HealthCheckRequest { service: args.service.clone() })
        .await
        .map_err(|s| format!("{}: {}", s.code(), s.message()))?;
    Ok(ServingStatus::try_from(r.into_inner().status).unwrap_or(ServingStatus::Unknown))
}
