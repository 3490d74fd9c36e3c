//! TLS to PostgreSQL: the libpq URL parameters `sslmode`, `sslrootcert`,
//! `sslcert` and `sslkey` (taken off the URL before tokio-postgres parses
//! the rest, which knows only `disable`/`prefer`/`require` and no files),
//! the rustls connector (ring provider, the one the relay's gRPC TLS uses)
//! and connecting with it: every connection the relay makes to the
//! database, the pool's and the change feed's session, goes through
//! [`Connector::connect`], so all use the same settings.
//!
//! What each mode checks (docs/OPERATIONS.md §8.12):
//! - `disable`: no TLS.
//! - `prefer` (the default, as in libpq): TLS when the server offers it,
//!   checked as `require`; a server that declines it gets a plaintext
//!   connection, logged at WARN and counted
//!   (`flagstream_postgres_connections_total{tls="off"}`) every time. A
//!   failed handshake is an error, never retried in plaintext.
//! - `require`: TLS or no connection; with `sslrootcert` the chain is
//!   checked as `verify-ca` (libpq's rule), without it not at all.
//! - `verify-ca`: the chain must lead to a certificate in `sslrootcert`;
//!   the host name is not checked.
//! - `verify-full`: the chain, and the URL's host must be named by the
//!   certificate (DNS name, or IP address for an IP host).

use std::convert::Infallible;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{WebPkiServerVerifier, danger};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres::{Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::ops::metrics::Metrics;

/// `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// No TLS.
    Disable,
    /// TLS if the server offers it (warned and counted when it does not).
    Prefer,
    /// TLS; the certificate checked only with `sslrootcert`.
    Require,
    /// TLS; the chain checked, not the host name.
    VerifyCa,
    /// TLS; the chain and the host name checked.
    VerifyFull,
}

impl Mode {
    /// The libpq name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Disable => "disable",
            Mode::Prefer => "prefer",
            Mode::Require => "require",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

/// Where trusted CA certificates come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Roots {
    /// A PEM file of one or more CA certificates.
    File(PathBuf),
    /// `sslrootcert=system`: the Mozilla roots built into the relay.
    System,
}

/// The TLS parameters of a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settings {
    /// `sslmode`.
    pub mode: Mode,
    /// `sslrootcert`.
    pub roots: Option<Roots>,
    /// `sslcert` and `sslkey`: the relay's client certificate (PEM) and key.
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl Settings {
    /// One line for the startup log and errors: the mode and the files.
    pub(crate) fn describe(&self) -> String {
        let mut s = format!("sslmode={}", self.mode.name());
        match &self.roots {
            Some(Roots::File(p)) => s.push_str(&format!(", sslrootcert={}", p.display())),
            Some(Roots::System) => s.push_str(", sslrootcert=system"),
            None => {}
        }
        if let Some((cert, _)) = &self.identity {
            s.push_str(&format!(", sslcert={}", cert.display()));
        }
        s
    }

    /// What the connection's certificate check is, in words.
    pub(crate) fn checks(&self) -> &'static str {
        match (self.mode, &self.roots) {
            (Mode::Disable, _) => "no TLS",
            (Mode::Prefer, None) => "TLS if the server offers it, certificate not checked",
            (Mode::Prefer, Some(_)) => "TLS if the server offers it, certificate chain checked",
            (Mode::Require, None) => "TLS, certificate not checked",
            (Mode::Require | Mode::VerifyCa, Some(_)) | (Mode::VerifyCa, None) => {
                "TLS, certificate chain checked, host name not checked"
            }
            (Mode::VerifyFull, _) => "TLS, certificate chain and host name checked",
        }
    }
}

/// A bad TLS parameter or file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TlsError {
    /// A parameter of the URL.
    #[error("{0}")]
    Param(String),
    /// A certificate or key file.
    #[error("{param} {path}: {what}")]
    File {
        /// `sslrootcert`, `sslcert` or `sslkey`.
        param: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        what: String,
    },
    /// rustls refused the combination.
    #[error("TLS configuration")]
    Rustls(#[from] rustls::Error),
}

/// Splits a `postgres://` URL into tokio-postgres's configuration and the
/// TLS settings. Never puts the URL itself in an error (its password).
pub(crate) fn parse(url: &str) -> Result<(tokio_postgres::Config, Settings), TlsError> {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, q),
        None => (url, ""),
    };
    let (mut mode, mut roots, mut cert, mut key) = (None, None, None, None);
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let value =
            || decode(v).ok_or_else(|| TlsError::Param(format!("store: {k}: not valid percent-encoding")));
        match k {
            "sslmode" => mode = Some(value()?),
            "sslrootcert" => roots = Some(value()?),
            "sslcert" => cert = Some(value()?),
            "sslkey" => key = Some(value()?),
            _ => kept.push(pair),
        }
    }
    let rest = if kept.is_empty() { base.to_owned() } else { format!("{base}?{}", kept.join("&")) };
    let mut config: tokio_postgres::Config =
        rest.parse().map_err(|e| TlsError::Param(format!("store: not a PostgreSQL URL: {e}")))?;
    let roots = roots.map(|r| if r == "system" { Roots::System } else { Roots::File(PathBuf::from(r)) });
    let mode = match mode.as_deref() {
        None if roots == Some(Roots::System) => Mode::VerifyFull,
        None => Mode::Prefer,
        Some("disable") => Mode::Disable,
        Some("prefer") => Mode::Prefer,
        Some("require") => Mode::Require,
        Some("verify-ca") => Mode::VerifyCa,
        Some("verify-full") => Mode::VerifyFull,
        Some(other) => {
            return Err(TlsError::Param(format!(
                "store: sslmode={other:?}: one of disable, prefer, require, verify-ca, verify-full"
            )));
        }
    };
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
        (None, None) => None,
        (Some(_), None) => {
            return Err(TlsError::Param(
                "store: sslcert needs sslkey (the certificate's private key)".into(),
            ));
        }
        (None, Some(_)) => {
            return Err(TlsError::Param("store: sslkey needs sslcert (the client certificate)".into()));
        }
    };
    match mode {
        Mode::Disable if roots.is_some() || identity.is_some() => {
            return Err(TlsError::Param(
                "store: sslmode=disable uses no TLS, yet sslrootcert, sslcert or sslkey is set: remove them or choose another sslmode".into(),
            ));
        }
        Mode::VerifyCa | Mode::VerifyFull if roots.is_none() => {
            return Err(TlsError::Param(format!(
                "store: sslmode={} needs sslrootcert (a PEM file of the CA certificates to trust, or `system`)",
                mode.name()
            )));
        }
        m if roots == Some(Roots::System) && m != Mode::VerifyFull => {
            return Err(TlsError::Param(format!(
                "store: sslrootcert=system trusts every public CA, so it needs sslmode=verify-full, not {}",
                m.name()
            )));
        }
        _ => {}
    }
    config.ssl_mode(match mode {
        Mode::Disable => tokio_postgres::config::SslMode::Disable,
        Mode::Prefer => tokio_postgres::config::SslMode::Prefer,
        Mode::Require | Mode::VerifyCa | Mode::VerifyFull => tokio_postgres::config::SslMode::Require,
    });
    Ok((config, Settings { mode, roots, identity }))
}

/// Percent-decoding of one URL query value.
fn decode(v: &str) -> Option<String> {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// What the last connection attempt negotiated.
const PLAINTEXT: u8 = 0;
const TLS: u8 = 1;
const LOCAL_SOCKET: u8 = 2;

/// Connects to the database with the URL's TLS settings. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Connector {
    settings: Arc<Settings>,
    rustls: MakeRustlsConnect,
    metrics: Metrics,
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connector").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl Connector {
    /// Reads the certificate files and builds the TLS configuration.
    pub(crate) fn new(settings: Settings, metrics: Metrics) -> Result<Connector, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let roots = settings.roots.as_ref().map(load_roots).transpose()?.map(Arc::new);
        let builder = match (settings.mode, roots) {
            (Mode::VerifyFull, Some(roots)) => builder.with_webpki_verifier(
                WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| TlsError::Param(format!("store: sslrootcert: {e}")))?,
            ),
            (_, Some(roots)) => {
                let inner = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                    .build()
                    .map_err(|e| TlsError::Param(format!("store: sslrootcert: {e}")))?;
                builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
            }
            // `disable` never uses it; `prefer` and `require` without
            // roots check nothing but the handshake's signatures.
            (_, None) => builder.dangerous().with_custom_certificate_verifier(Arc::new(Unchecked(provider))),
        };
        let config = match &settings.identity {
            Some((cert, key)) => {
                let chain = load_certs("sslcert", cert)?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                    param: "sslkey",
                    path: key.clone(),
                    what: format!("no usable private key (PEM): {e}"),
                })?;
                builder.with_client_auth_cert(chain, key)?
            }
            None => builder.with_no_client_auth(),
        };
        // Every series of this sslmode exported from the start, at 0: an
        // alert on `tls="off"` sees the first plaintext connection.
        for tls in ["on", "off", "local_socket"] {
            let labels = vec![("sslmode", settings.mode.name().to_owned()), ("tls", tls.to_owned())];
            metrics.postgres_connections.get_or_create(&labels).inc_by(0);
        }
        Ok(Connector { settings: Arc::new(settings), rustls: MakeRustlsConnect::new(config), metrics })
    }

    /// Opens one connection with `config` (its `sslmode` set by [`parse`]).
    /// A `prefer` connection the server kept in plaintext is logged at WARN;
    /// every connection is counted by whether it uses TLS.
    pub(crate) async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, Connection<Socket, Stream>), tokio_postgres::Error> {
        let seen = Arc::new(AtomicU8::new(PLAINTEXT));
        let tracked =
            Tracked { inner: self.rustls.clone(), seen: seen.clone(), settings: self.settings.clone() };
        let connected = config.connect(tracked).await?;
        let tls = match seen.load(Ordering::Acquire) {
            TLS => "on",
            LOCAL_SOCKET => "local_socket",
            _ => "off",
        };
        if self.settings.mode == Mode::Prefer && tls == "off" {
            tracing::warn!(
                hosts = ?config.get_hosts(),
                "connected to PostgreSQL WITHOUT TLS: the server declined it and sslmode=prefer allows plaintext; flags, key and token hashes and audit records cross the network in clear (set sslmode=require or verify-full to refuse this, docs/OPERATIONS.md §8.12)"
            );
        }
        // Counted after the warning is out: a count never runs ahead of its log line.
        self.metrics
            .postgres_connections
            .get_or_create(&vec![("sslmode", self.settings.mode.name().to_owned()), ("tls", tls.to_owned())])
            .inc();
        Ok(connected)
    }
}

/// The stream of a connection that may use TLS.
pub(crate) type Stream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

type Inner = <MakeRustlsConnect as MakeTlsConnect<Socket>>::TlsConnect;

/// The rustls connector, noting whether the handshake happened and
/// explaining a failed one.
struct Tracked {
    inner: MakeRustlsConnect,
    seen: Arc<AtomicU8>,
    settings: Arc<Settings>,
}

impl MakeTlsConnect<Socket> for Tracked {
    type Stream = Stream;
    type TlsConnect = TrackedConnect;
    type Error = Infallible;

    /// Called once per attempt (per host and address), after the socket
    /// connected and before the server is asked for TLS.
    fn make_tls_connect(&mut self, host: &str) -> Result<TrackedConnect, Infallible> {
        // A Unix socket has no host name: the server never offers TLS there.
        self.seen.store(if host.is_empty() { LOCAL_SOCKET } else { PLAINTEXT }, Ordering::Release);
        let inner = <MakeRustlsConnect as MakeTlsConnect<Socket>>::make_tls_connect(&mut self.inner, host)?;
        Ok(TrackedConnect { inner, seen: self.seen.clone(), settings: self.settings.clone() })
    }
}

struct TrackedConnect {
    inner: Inner,
    seen: Arc<AtomicU8>,
    settings: Arc<Settings>,
}

impl TlsConnect<Socket> for TrackedConnect {
    type Stream = Stream;
    type Error = HandshakeError;
    type Future = Pin<Box<dyn Future<Output = Result<Stream, HandshakeError>> + Send>>;

    /// Called when the server agreed to TLS.
    fn connect(self, socket: Socket) -> Self::Future {
        self.seen.store(TLS, Ordering::Release);
        let handshake = self.inner.connect(socket);
        let settings = self.settings;
        Box::pin(async move { handshake.await.map_err(|e| HandshakeError::new(&settings, e)) })
    }
}

/// A failed TLS handshake with the database, explained.
#[derive(Debug, thiserror::Error)]
#[error("TLS with the database failed ({settings}){hint}")]
pub(crate) struct HandshakeError {
    settings: String,
    hint: String,
    #[source]
    source: std::io::Error,
}

impl HandshakeError {
    fn new(settings: &Settings, source: std::io::Error) -> HandshakeError {
        let rustls = source.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>());
        let hint = match rustls {
            Some(rustls::Error::InvalidCertificate(c)) => match c {
                CertificateError::UnknownIssuer => {
                    ": the server's certificate is not signed by a CA in sslrootcert".to_owned()
                }
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                    ": the server's certificate does not name the URL's host (verify-full checks it)"
                        .to_owned()
                }
                CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                    ": the server's certificate has expired".to_owned()
                }
                CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                    ": the server's certificate is not valid yet (its start date is in the future)".to_owned()
                }
                other => format!(": the server's certificate was refused ({other:?})"),
            },
            Some(rustls::Error::AlertReceived(a)) => {
                format!(
                    ": the server refused the connection's TLS ({a:?}; a client certificate it does not accept?)"
                )
            }
            _ => String::new(),
        };
        HandshakeError { settings: settings.describe(), hint, source }
    }
}

fn load_certs(param: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file = |what: String| TlsError::File { param, path: path.to_owned(), what };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file(format!("cannot read it: {e}")))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file(format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(file("no certificate in it (PEM `BEGIN CERTIFICATE` blocks expected)".into()));
    }
    Ok(certs)
}

fn load_roots(roots: &Roots) -> Result<RootCertStore, TlsError> {
    match roots {
        Roots::System => Ok(RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() }),
        Roots::File(path) => {
            let mut store = RootCertStore::empty();
            for cert in load_certs("sslrootcert", path)? {
                store.add(cert).map_err(|e| TlsError::File {
                    param: "sslrootcert",
                    path: path.clone(),
                    what: format!("not a usable CA certificate: {e}"),
                })?;
            }
            Ok(store)
        }
    }
}

/// `verify-ca` (and `require`/`prefer` with `sslrootcert`): the webpki
/// check, less the host name.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        // webpki checks the chain first and the name last: a name error
        // means the chain passed.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require`/`prefer` without `sslrootcert` (libpq's meaning): encrypted,
/// the certificate not checked; the handshake's signatures still are.
#[derive(Debug)]
struct Unchecked(Arc<CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// What deadpool's `Connect` returns: a connection and the task driving it.
type PoolFuture<'a> = Pin<
    Box<
        dyn Future<Output = Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error>> + Send + 'a,
    >,
>;

/// The pool's way of opening a connection: [`Connector::connect`], the
/// connection driven on a task of its own.
pub(crate) struct PoolConnect(pub Connector);

impl deadpool_postgres::Connect for PoolConnect {
    fn connect(&self, config: &tokio_postgres::Config) -> PoolFuture<'_> {
        let (connector, config) = (self.0.clone(), config.clone());
        Box::pin(async move {
            let (client, connection) = connector.connect(&config).await?;
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::warn!(error = %e, "a pooled PostgreSQL connection ended with an error");
                }
            });
            Ok((client, task))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tls_parameters_come_off_the_url() {
        let (config, s) = parse(
            "postgres://u:p@db.example:5432/flags?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(s.mode, Mode::VerifyFull);
        assert_eq!(s.roots, Some(Roots::File("/etc/ca.pem".into())));
        assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        assert_eq!(config.get_application_name(), Some("x"));
        let (config, s) = parse("postgres://u@h/db").unwrap();
        assert_eq!((s.mode, config.get_ssl_mode()), (Mode::Prefer, tokio_postgres::config::SslMode::Prefer));
        assert_eq!(parse("postgres://u@h/db?sslrootcert=system").unwrap().1.mode, Mode::VerifyFull);
        let (_, s) = parse("postgres://u@h/db?sslmode=require&sslcert=c.pem&sslkey=k.pem").unwrap();
        assert_eq!(s.identity, Some(("c.pem".into(), "k.pem".into())));
    }

    #[test]
    fn bad_tls_parameters_are_named() {
        let err = |url: &str| parse(url).unwrap_err().to_string();
        assert!(err("postgres://u:secret@h/db?sslmode=allow").contains("sslmode=\"allow\": one of"));
        assert!(!err("postgres://u:secret@h/db?sslmode=allow").contains("secret"));
        assert!(err("postgres://u@h/db?sslmode=verify-ca").contains("needs sslrootcert"));
        assert!(
            err("postgres://u@h/db?sslmode=require&sslrootcert=system").contains("needs sslmode=verify-full")
        );
        assert!(err("postgres://u@h/db?sslcert=c.pem").contains("sslcert needs sslkey"));
        assert!(err("postgres://u@h/db?sslmode=disable&sslrootcert=ca.pem").contains("sslmode=disable"));
        assert!(err("postgres://u@h/db?sslrootcert=%zz").contains("percent-encoding"));
    }
}
