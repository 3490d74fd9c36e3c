//! TLS end to end: a relay serving gRPC over TLS with client certificates
//! required (mutual TLS); flagctl and the SDK connect with a private CA and
//! a client certificate; without the certificate they are refused.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use flagstream::{Client, Context, Source, Status};
use flagstream_tests::relay::Relay;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};

struct Pki {
    ca: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf = |names: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(names).unwrap();
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &ca).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (server_cert, server_key) = leaf(vec!["localhost".into()], ExtendedKeyUsagePurpose::ServerAuth);
    let (client_cert, client_key) = leaf(vec!["flagctl".into()], ExtendedKeyUsagePurpose::ClientAuth);
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: write("ca.pem", &ca.pem()),
        server_cert: write("server.pem", &server_cert),
        server_key: write("server.key", &server_key),
        client_cert: write("client.pem", &client_cert),
        client_key: write("client.key", &client_key),
    }
}

fn flagctl(args: &[&str]) -> std::process::Output {
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    Command::new(bin)
        .args(["--config", "/nonexistent/flagctl.toml"])
        .args(args)
        .env("FLAGSTREAM_ENV", "demo")
        .output()
        .unwrap()
}

/// Mutual TLS: with the CA and a client certificate everything works;
/// without the certificate, or over plain HTTP, nothing does.
#[tokio::test]
async fn mutual_tls_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let pki = pki(dir.path());
    let s = |p: &PathBuf| p.to_str().unwrap().to_owned();
    let relay = Relay::start(
        dir.path(),
        &[
            "--tls-cert",
            &s(&pki.server_cert),
            "--tls-key",
            &s(&pki.server_key),
            "--tls-client-ca",
            &s(&pki.ca),
        ],
    )
    .await;
    let url = format!("https://localhost:{}", relay.grpc.port());
    let token = relay.admin_token();

    let ok = flagctl(&[
        "--relay",
        &url,
        "--token",
        &token,
        "--ca-cert",
        &s(&pki.ca),
        "--client-cert",
        &s(&pki.client_cert),
        "--client-key",
        &s(&pki.client_key),
        "flag",
        "list",
    ]);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert!(String::from_utf8_lossy(&ok.stdout).contains("new-checkout"));

    let no_cert = flagctl(&["--relay", &url, "--token", &token, "--ca-cert", &s(&pki.ca), "flag", "list"]);
    // The same call without the client certificate: the relay ends the
    // handshake (TLS 1.3 delivers its CertificateRequired alert after the
    // client's first write, so flagctl may see only the connection end).
    let err = String::from_utf8_lossy(&no_cert.stderr);
    assert_eq!(no_cert.status.code(), Some(1), "{err}");
    // What the client reads after the server ends the handshake varies with
    // timing (the alert, a closed connection, a broken pipe): always a
    // transport failure, never an answer. The SDK below waits for the
    // alert itself.
    assert!(err.contains("CertificateRequired") || err.contains("transport error"), "{err}");
    assert!(no_cert.stdout.is_empty(), "no certificate, yet an answer");
    let plain =
        flagctl(&["--relay", &relay.url(), "--token", &token, "flag", "list", "--connect-timeout", "2s"]);
    // Plain HTTP/2 to the TLS port: the relay reads a TLS record, not a
    // frame, and the connection fails; nothing is served.
    let err = String::from_utf8_lossy(&plain.stderr);
    assert_eq!(plain.status.code(), Some(1), "{err}");
    // A transport failure (the exact one depends on timing: a frame error
    // or a closed connection), never an answer from the relay.
    assert!(err.contains("http2 error") || err.contains("transport error"), "{err}");
    assert!(plain.stdout.is_empty(), "plaintext got an answer: {}", String::from_utf8_lossy(&plain.stdout));

    let c = Client::builder()
        .endpoints([url.clone()])
        .sdk_key(relay.demo_key())
        .tls_ca_pem(std::fs::read(&pki.ca).unwrap())
        .tls_identity_pem(std::fs::read(&pki.client_cert).unwrap(), std::fs::read(&pki.client_key).unwrap())
        .build()
        .unwrap();
    let status = c.wait_ready(Duration::from_secs(20)).await;
    assert!(matches!(status, Status::Ready { source: Source::Stream, .. }), "{status:?}");
    assert!(c.bool("beta-banner", &Context::new("user-1"), false));

    let anonymous = Client::builder()
        .endpoints([url])
        .sdk_key(relay.demo_key())
        .tls_ca_pem(std::fs::read(&pki.ca).unwrap())
        .backoff_base(Duration::from_millis(50))
        .build()
        .unwrap();
    // It never gets data, and says why: the relay's CertificateRequired
    // alert shows up in its attempts.
    flagstream_tests::cluster::eventually("the CertificateRequired refusal", || match anonymous.status() {
        Status::Initializing { attempts } => attempts.iter().any(|a| a.error.contains("CertificateRequired")),
        other => panic!("a client without a certificate got data: {other:?}"),
    })
    .await;
    assert!(!anonymous.status().has_data());
}
