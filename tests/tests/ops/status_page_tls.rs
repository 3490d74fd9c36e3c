//! No token crosses a network in clear. With `metrics-tls` the metrics
//! listener (metrics and the status page) speaks only TLS with the relay's
//! certificate: a scrape and the page's data load over HTTPS, a plaintext
//! request gets nothing, a failed handshake is counted. Over plaintext, the
//! status page takes a token only from this host: `/status/access` says
//! whether one would be accepted (so the page never sends it), and a
//! token from another host is refused with the reason the page shows
//! (that refusal is decided by the client's address, which a test on this
//! machine cannot vary: the unit test `status_page::tests` covers it).

use std::path::Path;
use std::sync::Arc;

use flagstream_tests::relay::Relay;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A CA and a server certificate for `localhost`, as PEM files in `dir`:
/// (CA PEM, cert path, key path).
fn pki(dir: &Path) -> (String, String, String) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".into()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &ca).unwrap();
    let (cert_path, key_path) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (ca.pem(), cert_path.display().to_string(), key_path.display().to_string())
}

/// `GET path` over `stream`: the status code and the body.
async fn get<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    path: &str,
    token: Option<&str>,
) -> std::io::Result<(u16, String)> {
    let auth = token.map(|t| format!("authorization: Bearer {t}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n{auth}connection: close\r\n\r\n");
    stream.write_all(req.as_bytes()).await?;
    let mut out = Vec::new();
    // A TLS peer may close without close_notify: what was read counts.
    let _ = stream.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let code = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Ok((code, body))
}

async fn https(ca_pem: &str, addr: std::net::SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let config =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tls =
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp).await.expect("TLS handshake");
    get(tls, path, token).await.unwrap()
}

#[tokio::test]
async fn the_metrics_listener_speaks_tls_and_the_page_keeps_tokens_local() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, cert, key) = pki(dir.path());
    let relay =
        Relay::start(dir.path(), &["--tls-cert", &cert, "--tls-key", &key, "--metrics-tls", "true"]).await;
    let token = relay.admin_token();

    let (code, body) = https(&ca, relay.metrics, "/metrics", None).await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("flagstream_connections"), "a scrape over TLS");
    let (code, body) = https(&ca, relay.metrics, "/status.json", Some(&token)).await;
    assert_eq!(code, 200, "the page's data over TLS: {body}");
    assert!(body.contains("\"environments\""), "{body}");

    // Plain HTTP to the TLS listener: no answer, a failed handshake counted.
    let plain = tokio::net::TcpStream::connect(relay.metrics).await.unwrap();
    let (code, _) = get(plain, "/metrics", None).await.unwrap();
    assert_eq!(code, 0, "nothing served in clear");
    let (_, metrics) = https(&ca, relay.metrics, "/metrics", None).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("flagstream_limit_hits_total{limit=\"metrics_tls_handshake\"} ")
                && !l.ends_with(" 0")),
        "the failed handshake is counted"
    );

    // Plaintext: from this host, the page says a token would be accepted.
    let plain_dir = tempfile::tempdir().unwrap();
    let plain = Relay::start(plain_dir.path(), &[]).await;
    let tcp = tokio::net::TcpStream::connect(plain.metrics).await.unwrap();
    let (code, body) = get(tcp, "/status/access", None).await.unwrap();
    assert_eq!(code, 200);
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["token_accepted"], true, "{body}");
    let tcp = tokio::net::TcpStream::connect(plain.metrics).await.unwrap();
    let (code, _) = get(tcp, "/status.json", Some(&plain.admin_token())).await.unwrap();
    assert_eq!(code, 200, "a loopback client's token is accepted over plaintext");
}
