//! Network posture: the Admin API can live on its own address, a relay
//! reachable from other hosts without TLS says so loudly, and no secret
//! (admin token, SDK key) appears in any log or `Debug` output of a full
//! run: relay, SDK and flagctl.

use std::io::Write;

use clap::Parser;
use std::process::Command;
use std::sync::{Arc, Mutex};

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, Token};
use flagstream_tests::subscriber::Subscriber;
use tonic::Code;

#[tokio::test]
async fn the_admin_api_can_be_served_on_its_own_address_only() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--admin-listen", "127.0.0.1:0"]).await;
    assert_ne!(relay.admin, relay.grpc);
    // Admin on the SDK-facing port: not there.
    let mut on_grpc = AdminClient::with_interceptor(relay.channel().await, Token(relay.admin_token()));
    let e = on_grpc.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
    // On its own port it works; SDKs still stream from the main port.
    let mut admin = relay.admin().await;
    assert!(
        !admin
            .list_environments(pb::ListEnvironmentsRequest::default())
            .await
            .unwrap()
            .into_inner()
            .environments
            .is_empty()
    );
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let admin_channel = tonic::transport::Channel::from_shared(format!("http://{}", relay.admin))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let e = Subscriber::connect(admin_channel, &relay.demo_key(), None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented, "{e:?}");
}

#[tokio::test]
async fn plaintext_on_a_non_loopback_address_is_loud() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start_on(dir.path(), "0.0.0.0:0", &[]).await;
    assert!(relay.log().contains("serving gRPC WITHOUT TLS on a non-loopback address"), "{}", relay.log());
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    assert!(!relay.log().contains("WITHOUT TLS"), "loopback without TLS is fine");
}

/// Collects everything the SDK logs.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn flagctl(relay: &Relay, token: &str, args: &[&str]) -> std::process::Output {
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    Command::new(bin)
        .args(["--config", "/nonexistent/flagctl.toml", "--relay", &relay.url()])
        .args(args)
        .env("FLAGSTREAM_TOKEN", token)
        .env("RUST_LOG", "trace")
        .output()
        .unwrap()
}

#[tokio::test]
async fn no_secret_appears_in_logs_or_debug_output() {
    let captured = Captured::default();
    let writer = captured.clone();
    let _guard = tracing::subscriber::set_default(
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish(),
    );
    let dir = tempfile::tempdir().unwrap();
    // The relay at its most verbose.
    let relay = Relay::start_logged(dir.path(), "127.0.0.1:0", &["--demo", "true"], "trace").await;
    let boot = relay.admin_token();
    let mut secrets = vec![boot.clone(), relay.demo_key()];
    let mut noise = String::new();
    // flagctl's configuration structs, parsed with secrets in them.
    let cli = flagctl::Cli::try_parse_from(["flagctl", "--token", &boot, "status"]).unwrap();
    noise += &format!("{cli:?}");
    // The token from a file, as --help recommends.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &boot).unwrap();
    let out = flagctl(&relay, "", &["--token-file", token_file.to_str().unwrap(), "status"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    noise += &String::from_utf8_lossy(&out.stdout);
    noise += &String::from_utf8_lossy(&out.stderr);

    // flagctl: create a token and a key, rotate, use a wrong token.
    let out = flagctl(&relay, &boot, &["token", "create", "ci", "--role", "write", "--env", "demo"]);
    assert!(out.status.success());
    secrets.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
    noise += &String::from_utf8_lossy(&out.stderr);
    for args in [
        &["key", "create", "--name", "svc", "-e", "demo"][..],
        &["key", "rotate", "k1", "--grace", "1m", "-e", "demo", "--yes"],
    ] {
        let out = flagctl(&relay, &boot, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        secrets.push(String::from_utf8_lossy(&out.stdout).trim().to_owned());
        noise += &String::from_utf8_lossy(&out.stderr);
    }
    // The rest of the key and token lifecycles, printed in every format.
    for args in [
        &["key", "list", "-e", "demo"][..],
        &["key", "list", "-e", "demo", "-o", "json"],
        &["token", "list", "-o", "yaml"],
        &["key", "revoke", "k2", "-e", "demo", "--yes"],
        &["token", "revoke", "ci", "--yes"],
        &["token", "list"],
    ] {
        let out = flagctl(&relay, &boot, args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        noise += &String::from_utf8_lossy(&out.stdout);
        noise += &String::from_utf8_lossy(&out.stderr);
    }
    assert!(noise.contains("k3"), "key list shows the rotated key's successor: {noise}");
    assert!(
        !String::from_utf8_lossy(&flagctl(&relay, &boot, &["key", "list", "-e", "demo"]).stdout)
            .contains("k2"),
        "k2 was revoked"
    );
    let out = flagctl(&relay, "fs_admin_wrong_guess_0123456789", &["flag", "list", "-e", "demo"]);
    assert_eq!(out.status.code(), Some(7));
    noise += &String::from_utf8_lossy(&out.stderr);
    secrets.push("fs_admin_wrong_guess_0123456789".into());

    // The SDK: build, stream, and print everything printable.
    let sdk_key = secrets[4].clone(); // k3, from the rotation (k2 was revoked)
    let builder = relay.sdk_for(sdk_key.clone());
    noise += &format!("{builder:?}");
    let client = builder.build().unwrap();
    let status = client.wait_ready(STEP).await;
    assert!(status.has_data(), "the SDK never got data: {status:?}");
    noise += &format!("{client:?} {:?} {:?}", client.status(), client.stats());
    drop(client);
    // And a Subscribe with a wrong key, logged by the relay.
    assert!(Subscriber::connect(relay.channel().await, "fs_sdk_wrong_guess_0123456789", None).await.is_err());
    secrets.push("fs_sdk_wrong_guess_0123456789".into());
    // Every admin call through the fixture (its Debug too).
    let admin = relay.admin().await;
    noise += &format!("{admin:?}");

    noise += &relay.log();
    noise += &String::from_utf8_lossy(&captured.0.lock().unwrap());
    assert!(noise.len() > 2_000, "too little output to mean anything: {noise}");
    for s in &secrets {
        assert!(s.len() > 12, "not a secret: {s:?}");
        assert!(!noise.contains(s.as_str()), "secret {s:?} leaked in:\n{noise}");
    }
}
