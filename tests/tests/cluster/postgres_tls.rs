//! TLS between relays and PostgreSQL, against the tests' own server started
//! with `ssl=on` and a CA generated for it: `verify-full` with the right CA
//! connects every session (pool and change feed) over TLS and serves
//! writes; a wrong CA, a host the certificate does not name, or plaintext
//! against a TLS-only server each stop the relay at start with an error
//! naming the problem; `require` encrypts without a CA; a client
//! certificate is presented; `prefer` against a plaintext server connects
//! but warns and counts every plaintext connection.

use std::process::ExitStatus;

use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn s(p: &std::path::Path) -> String {
    p.to_str().expect("utf-8 path").to_owned()
}

/// The database's view of the relay's sessions, once its change feed's
/// session is among them (it connects after the relay started): (how
/// many, how many of them over TLS).
async fn relay_sessions(pg: &Postgres) -> (u64, u64) {
    flagstream_tests::cluster::eventually("the change feed's session", || {
        pg.sql(
            "postgres",
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'flagstream-relay feed'",
        )
        .trim()
            != "0"
    })
    .await;
    let out = pg.sql(
        "postgres",
        "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
         WHERE a.application_name LIKE 'flagstream-relay%'",
    );
    let mut it = out.trim().split('|').map(|v| v.parse::<u64>().expect("a count"));
    (it.next().expect("count"), it.next().expect("ssl count"))
}

async fn refused(dir: &std::path::Path, url: &str) -> (Option<ExitStatus>, String) {
    match Relay::try_start(dir, &["--store", url]).await {
        Ok(_) => panic!("the relay started with {url}"),
        Err(e) => e,
    }
}

/// verify-full with the CA that signed the server's certificate: the relay
/// starts, says which mode it uses, serves a write, and every session it
/// holds (the pool's and the change feed's) is encrypted.
#[tokio::test]
async fn verify_full_with_the_right_ca_serves_writes_over_tls() {
    let Some(pg) = Postgres::start_tls() else { return };
    let pki = pg.tls.clone().expect("a TLS server");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=verify-full&sslrootcert={}", pg.database("flags"), s(&pki.ca));
    let relay = Relay::start(dir.path(), &["--store", &url]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("over-tls", true)).await.expect("a write over TLS");
    assert!(relay.log().contains("sslmode=verify-full"), "the startup log names the mode:\n{}", relay.log());
    let (sessions, encrypted) = relay_sessions(&pg).await;
    assert!(sessions >= 2, "the pool and the feed hold sessions: {sessions}");
    assert_eq!(encrypted, sessions, "every session of the relay is encrypted");
    let tls_on =
        relay.metric("flagstream_postgres_connections_total{sslmode=\"verify-full\",tls=\"on\"}").await;
    assert!(tls_on >= 2.0, "connections counted as TLS: {tls_on}");
    assert_eq!(
        relay.metric("flagstream_postgres_connections_total{sslmode=\"verify-full\",tls=\"off\"}").await,
        0.0
    );
}

/// A CA that did not sign the server's certificate: the relay does not
/// start, exits 1, and says the certificate is not signed by a CA it trusts.
#[tokio::test]
async fn a_wrong_ca_is_refused_at_start_naming_the_certificate_problem() {
    let Some(pg) = Postgres::start_tls() else { return };
    let pki = pg.tls.clone().expect("a TLS server");
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=verify-full&sslrootcert={}", pg.database("flags"), s(&pki.other_ca));
    let (status, log) = refused(dir.path(), &url).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "exit status; log:\n{log}");
    assert!(log.contains("not signed by a CA in sslrootcert"), "names the problem:\n{log}");
    assert!(log.contains(&s(&pki.other_ca)), "names the CA file:\n{log}");
    assert!(!log.contains("flagstream-relay listening"), "{log}");
}

/// verify-full checks the host name, verify-ca does not: reached at an
/// address (`hostaddr`) under a name the certificate does not hold.
#[tokio::test]
async fn verify_full_checks_the_host_name_and_verify_ca_does_not() {
    let Some(pg) = Postgres::start_tls() else { return };
    let pki = pg.tls.clone().expect("a TLS server");
    let dir = tempfile::tempdir().unwrap();
    pg.database("flags");
    let url = |mode: &str| {
        format!(
            "postgres://postgres@db.example.invalid:{}/flags?hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={}",
            pg.port,
            s(&pki.ca)
        )
    };
    let (status, log) = refused(&dir.path().join("full"), &url("verify-full")).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(log.contains("does not name the URL's host"), "names the problem:\n{log}");
    let relay = Relay::start(&dir.path().join("ca"), &["--store", &url("verify-ca")]).await;
    put(&mut relay.admin().await, "demo", bool_flag("chain-only", true)).await.expect("a write");
    let (sessions, encrypted) = relay_sessions(&pg).await;
    assert_eq!((sessions >= 2, encrypted), (true, sessions));
}

/// `require` without a CA: encrypted, the certificate not checked.
#[tokio::test]
async fn require_encrypts_without_a_ca() {
    let Some(pg) = Postgres::start_tls() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = format!("{}?sslmode=require", pg.database("flags"));
    let relay = Relay::start(dir.path(), &["--store", &url]).await;
    put(&mut relay.admin().await, "demo", bool_flag("required", true)).await.expect("a write");
    let (sessions, encrypted) = relay_sessions(&pg).await;
    assert_eq!((sessions >= 2, encrypted), (true, sessions));
}

/// A server that takes TLS connections only (`hostssl`): `sslmode=disable`
/// is refused at start with the server's reason; `require` connects.
#[tokio::test]
async fn disable_against_a_tls_only_server_is_refused_clearly() {
    let Some(pg) = Postgres::start_tls() else { return };
    let dir = tempfile::tempdir().unwrap();
    let base = pg.database("flags");
    pg.set_hba("hostssl all all 127.0.0.1/32 trust");
    let (status, log) = refused(&dir.path().join("plain"), &format!("{base}?sslmode=disable")).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(
        log.contains("no pg_hba.conf entry") && log.contains("no encryption"),
        "the server's reason:\n{log}"
    );
    Relay::start(&dir.path().join("tls"), &["--store", &format!("{base}?sslmode=require")]).await;
}

/// A server that wants a client certificate for the user `relay`: without
/// `sslcert`/`sslkey` the relay is refused; with them it connects.
#[tokio::test]
async fn a_client_certificate_is_presented() {
    let Some(pg) = Postgres::start_tls() else { return };
    let pki = pg.tls.clone().expect("a TLS server");
    let dir = tempfile::tempdir().unwrap();
    pg.database("flags");
    pg.sql("postgres", "CREATE ROLE relay LOGIN SUPERUSER");
    pg.set_hba(
        "host all postgres 127.0.0.1/32 trust\nhostssl all relay 127.0.0.1/32 trust clientcert=verify-full",
    );
    let url = format!(
        "postgres://relay@127.0.0.1:{}/flags?sslmode=verify-full&sslrootcert={}",
        pg.port,
        s(&pki.ca)
    );
    let (status, log) = refused(&dir.path().join("none"), &url).await;
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(log.to_lowercase().contains("certificate"), "{log}");
    let with_cert = format!("{url}&sslcert={}&sslkey={}", s(&pki.client_cert), s(&pki.client_key));
    let relay = Relay::start(&dir.path().join("cert"), &["--store", &with_cert]).await;
    put(&mut relay.admin().await, "demo", bool_flag("with-cert", true)).await.expect("a write");
}

/// `prefer` (also the default) against a server without TLS: the relay
/// runs, and every plaintext connection is logged at WARN and counted.
#[tokio::test]
async fn prefer_against_a_plaintext_server_warns_and_counts() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--store", &pg.database("flags")]).await;
    put(&mut relay.admin().await, "demo", bool_flag("plain", true)).await.expect("a write");
    let (sessions, encrypted) = relay_sessions(&pg).await;
    assert_eq!((sessions >= 2, encrypted), (true, 0), "the pool's and the feed's sessions, in plaintext");
    let plaintext =
        relay.metric("flagstream_postgres_connections_total{sslmode=\"prefer\",tls=\"off\"}").await;
    assert!(plaintext >= 2.0, "the pool's and the feed's connections counted: {plaintext}");
    let warnings = relay.log().lines().filter(|l| l.contains("WARN") && l.contains("WITHOUT TLS")).count();
    assert!(
        warnings as f64 >= plaintext,
        "one warning per plaintext connection ({warnings} for {plaintext})"
    );
}
