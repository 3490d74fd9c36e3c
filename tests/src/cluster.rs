//! A relay cluster for tests: a primary and replica relays, real processes
//! on loopback, each in its own data directory; replicas authenticate with
//! a token of the replicate scope made at the primary.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flagstream_proto::v1 as pb;

use crate::STEP;
use crate::relay::Relay;

/// Creates a replicate-scope token at `primary` and writes it to
/// `dir/replicate-token`; returns the file.
pub async fn replicate_token(primary: &Relay, dir: &Path, name: &str) -> PathBuf {
    let secret = primary
        .admin()
        .await
        .create_token(pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Read as i32,
            environments: vec![],
            replicate: true,
        })
        .await
        .expect("create the replicate token")
        .into_inner()
        .secret;
    std::fs::create_dir_all(dir).expect("token dir");
    let path = dir.join(format!("{name}-token"));
    std::fs::write(&path, secret).expect("write the token file");
    path
}

impl Relay {
    /// Starts a replica of `upstreams` with its data in `dir`.
    pub async fn start_replica(dir: &Path, upstreams: &[String], token: &Path, args: &[&str]) -> Relay {
        Relay::start_replica_on(dir, "127.0.0.1:0", upstreams, token, args).await
    }

    /// [`Relay::start_replica`] listening on `listen`.
    pub async fn start_replica_on(
        dir: &Path,
        listen: &str,
        upstreams: &[String],
        token: &Path,
        args: &[&str],
    ) -> Relay {
        let upstream = upstreams.join(",");
        let token = token.to_str().expect("utf-8 path");
        let mut all = vec![
            "--role",
            "replica",
            "--upstream",
            &upstream,
            "--upstream-token-file",
            token,
            "--demo",
            "false",
        ];
        all.extend_from_slice(args);
        Relay::start_on(dir, listen, &all).await
    }

    /// The relay's status.
    pub async fn status(&self) -> pb::StatusResponse {
        self.admin().await.status(pb::StatusRequest {}).await.expect("status").into_inner()
    }

    /// Waits until the relay reports ready (health SERVING).
    pub async fn wait_ready(&self) {
        self.wait_status("ready", |s| s.ready).await;
    }

    /// Waits until `env` is at `revision` or later here.
    pub async fn wait_head(&self, env: &str, revision: u64) {
        self.wait_status(&format!("{env} at revision {revision}"), |s| {
            s.environments.iter().any(|e| e.name == env && e.head_revision >= revision)
        })
        .await;
    }

    /// Waits until the status satisfies `ok` (polled every 20 ms, at most
    /// one test step).
    pub async fn wait_status(&self, what: &str, ok: impl Fn(&pb::StatusResponse) -> bool) {
        let mut admin = self.admin().await;
        let deadline = tokio::time::Instant::now() + STEP;
        loop {
            if let Ok(s) = admin.status(pb::StatusRequest {}).await
                && ok(s.get_ref())
            {
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Waits until `f` holds (polled every 20 ms, at most one test step).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + STEP;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for a condition that needs to await (a metrics scrape,
/// a health check): polled every 100 ms, at most [`STEP`].
pub async fn eventually_async<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + STEP;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A primary with `n` replicas following it directly, all ready.
#[derive(Debug)]
pub struct Cluster {
    /// The primary.
    pub primary: Relay,
    /// Its replicas.
    pub replicas: Vec<Relay>,
    /// The replicas' token file.
    pub token: PathBuf,
    /// The directory everything lives under.
    pub dir: PathBuf,
}

impl Cluster {
    /// Starts a primary (with the demo environment) and `n` replicas under
    /// `dir`; `primary_args` and `replica_args` go to each command line.
    pub async fn start(dir: &Path, n: usize, primary_args: &[&str], replica_args: &[&str]) -> Cluster {
        let primary = Relay::start(&dir.join("primary"), primary_args).await;
        let token = replicate_token(&primary, dir, "replicas").await;
        let mut replicas = Vec::new();
        for i in 0..n {
            let mut r = Relay::start_replica(
                &dir.join(format!("replica-{i}")),
                &[primary.url()],
                &token,
                replica_args,
            )
            .await;
            r.admin_secret = Some(primary.admin_token());
            replicas.push(r);
        }
        for r in &replicas {
            r.wait_ready().await;
        }
        Cluster { primary, replicas, token, dir: dir.to_owned() }
    }
}
