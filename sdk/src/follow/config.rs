//! How to follow: endpoints, credential, TLS and every timing of the
//! connection's life ([`FollowConfig`], with the SDK's defaults).

use std::time::Duration;

use flagstream_proto::v1 as pb;

/// TLS settings for `https://` endpoints.
#[derive(Clone, Default)]
pub struct Tls {
    /// PEM CA bundle to trust instead of the public web roots.
    pub ca: Option<Vec<u8>>,
    /// PEM client certificate and key (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for Tls {
    /// Never prints key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("custom_ca", &self.ca.is_some())
            .field("client_identity", &self.identity.is_some())
            .finish()
    }
}

impl Tls {
    /// What is wrong with the PEM given, if anything: a CA or certificate
    /// without a certificate block, a key without a private key block
    /// (checked when the client is built, not at the first connect).
    pub fn pem_problem(&self) -> Option<String> {
        let has = |pem: &[u8], begin: &str, end: &str| {
            let text = String::from_utf8_lossy(pem);
            text.contains(begin) && text.contains(end)
        };
        let cert = |pem: &[u8]| has(pem, "-----BEGIN CERTIFICATE-----", "-----END CERTIFICATE-----");
        if let Some(ca) = &self.ca
            && !cert(ca)
        {
            return Some("tls_ca_pem: no PEM certificate (a -----BEGIN CERTIFICATE----- block)".into());
        }
        if let Some((c, k)) = &self.identity {
            if !cert(c) {
                return Some(
                    "tls_identity_pem: the certificate has no -----BEGIN CERTIFICATE----- block".into(),
                );
            }
            if !has(k, "-----BEGIN", "PRIVATE KEY-----") {
                return Some("tls_identity_pem: the key has no PEM private key block".into());
            }
        }
        None
    }

    /// The tonic TLS configuration.
    pub fn config(&self) -> tonic::transport::ClientTlsConfig {
        let mut c = tonic::transport::ClientTlsConfig::new();
        c = match &self.ca {
            Some(ca) => c.ca_certificate(tonic::transport::Certificate::from_pem(ca)),
            None => c.with_webpki_roots(),
        };
        if let Some((cert, key)) = &self.identity {
            c = c.identity(tonic::transport::Identity::from_pem(cert, key));
        }
        c
    }
}

/// How to follow: endpoints, credential, and every timing of the
/// connection's life. [`FollowConfig::default`] holds the SDK's defaults
/// (PROTOCOL.md §2.8).
#[derive(Debug, Clone)]
pub struct FollowConfig {
    /// Relay URLs, tried in this order from the first (rotating on failure).
    pub endpoints: Vec<String>,
    /// `Hello.sdk_key`: an SDK key, or for a replica relay its token with
    /// the replicate scope.
    pub credential: crate::secret::Secret,
    /// `Hello.environment`: empty for SDKs (the key selects it); a relay
    /// follower names the environment its token is to follow.
    pub environment: String,
    /// `Hello.subscriber_kind`.
    pub subscriber_kind: pb::SubscriberKind,
    /// `Hello.sdk_name` (e.g. `flagstream-rust`, `flagstream-relay`).
    pub sdk_name: String,
    /// `Hello.instance_id`: one per process, kept across reconnects.
    pub instance_id: String,
    /// Connect timeout per attempt.
    pub connect_timeout: Duration,
    /// HTTP/2 keepalive ping interval (also while idle).
    pub keepalive_interval: Duration,
    /// HTTP/2 keepalive ping timeout.
    pub keepalive_timeout: Duration,
    /// `TCP_USER_TIMEOUT` of the connection.
    pub tcp_user_timeout: Duration,
    /// Time allowed for a stream's first message.
    pub first_message_timeout: Duration,
    /// Heartbeat interval assumed until the relay states its own.
    pub heartbeat_default: Duration,
    /// Missed heartbeat intervals before the stream counts as stalled.
    pub watchdog_misses: u32,
    /// First backoff ceiling.
    pub backoff_base: Duration,
    /// Largest backoff ceiling.
    pub backoff_cap: Duration,
    /// A stream up this long resets the backoff.
    pub healthy_after: Duration,
    /// Random delay (up to) before resubscribing after a stall.
    pub stall_jitter: Duration,
    /// Without a stream for this long, [`Event::Stale`] is raised.
    pub stale_after: Duration,
    /// Largest message accepted (`max_decoding_message_size`).
    pub max_message_bytes: usize,
    /// Largest snapshot accepted, summed item bytes (memory stays bounded
    /// even if a relay never sends the last chunk).
    pub max_snapshot_bytes: usize,
    /// How often a relay follower offers its propagation report upstream.
    pub report_interval: Duration,
    /// How often the sink's usage summaries ([`Sink::usage`](super::Sink::usage))
    /// are sent (PROTOCOL.md "Usage summaries").
    pub usage_interval: Duration,
    /// TLS for `https://` endpoints.
    pub tls: Tls,
}

impl Default for FollowConfig {
    fn default() -> Self {
        FollowConfig {
            endpoints: Vec::new(),
            credential: crate::secret::Secret::default(),
            environment: String::new(),
            subscriber_kind: pb::SubscriberKind::Sdk,
            sdk_name: "flagstream-rust".into(),
            instance_id: format!("{:016x}", rand::random::<u64>()),
            connect_timeout: Duration::from_secs(3),
            keepalive_interval: Duration::from_secs(3),
            keepalive_timeout: Duration::from_secs(2),
            tcp_user_timeout: Duration::from_secs(20),
            first_message_timeout: Duration::from_secs(10),
            heartbeat_default: Duration::from_secs(15),
            watchdog_misses: 3,
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(30),
            healthy_after: Duration::from_secs(60),
            stall_jitter: Duration::from_secs(2),
            stale_after: Duration::from_secs(5),
            max_message_bytes: 16 << 20,
            max_snapshot_bytes: flagstream_core::Limits::default().max_snapshot_bytes,
            report_interval: Duration::from_secs(1),
            usage_interval: Duration::from_secs(60),
            tls: Tls::default(),
        }
    }
}
