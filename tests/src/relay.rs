//! A real relay process for tests: started from the `relay` binary on
//! `127.0.0.1:0` in its own data directory, its addresses read from the
//! line it prints, stopped with SIGTERM or SIGKILL.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

/// How long a relay may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `relay` binary of this package: beside the running executable (the
/// load tool) or one level up (integration tests run from `deps/`).
pub fn relay_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("own executable path");
    let name = format!("relay{}", std::env::consts::EXE_SUFFIX);
    exe.ancestors().skip(1).take(2).map(|d| d.join(&name)).find(|p| p.exists()).unwrap_or_else(|| {
        panic!(
            "the relay binary is not built next to {}: build it with `cargo build [--release] -p flagstream-tests --bin relay` (tests build it themselves)",
            exe.display()
        )
    })
}

/// A running relay process.
#[derive(Debug)]
pub struct Relay {
    child: Child,
    /// gRPC address.
    pub grpc: SocketAddr,
    /// Metrics address.
    pub metrics: SocketAddr,
    /// Admin API address (= `grpc` unless started with `--admin-listen`).
    pub admin: SocketAddr,
    /// OFREP address, when started with `--ofrep-listen`.
    pub ofrep: Option<SocketAddr>,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Captured stderr lines so far are written here.
    pub stderr_log: PathBuf,
    /// The admin token to use instead of the one the relay wrote (a
    /// replica has none of its own: it holds its primary's tokens).
    pub admin_secret: Option<String>,
}

/// Adds the admin bearer token to every request.
#[derive(Clone, Debug)]
pub struct Token(pub String);

impl tonic::service::Interceptor for Token {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let v = MetadataValue::try_from(format!("Bearer {}", self.0))
            .map_err(|_| tonic::Status::internal("bad token"))?;
        req.metadata_mut().insert("authorization", v);
        req.metadata_mut().insert("x-flagstream-actor", MetadataValue::from_static("test-suite"));
        Ok(req)
    }
}

/// An authenticated admin client.
pub type Admin = AdminClient<InterceptedService<Channel, Token>>;

/// The `RUST_LOG` filter of the relays tests start: the relay's own
/// streams at debug, what a failing test's log needs.
const TEST_LOG: &str = "info,flagstream_relay=debug";

/// The `RUST_LOG` filter of every relay [`Relay::start_on`] starts from
/// now on, instead of the tests' debug filter (set once; `false` if it
/// was set before). The load tool sets the relay's own default, `info`:
/// logging every delivery at debug costs more than a delivery.
static DEFAULT_LOG: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the filter of [`DEFAULT_LOG`].
pub fn set_default_log(filter: &str) -> bool {
    DEFAULT_LOG.set(filter.to_owned()).is_ok()
}

impl Relay {
    /// Starts a relay with its data in `dir` and extra command-line
    /// arguments (after `serve`).
    pub async fn start(dir: &Path, args: &[&str]) -> Relay {
        Relay::start_on(dir, "127.0.0.1:0", args).await
    }

    /// Starts a relay listening on `listen` (to restart on the same port),
    /// logging at the [default filter](set_default_log).
    pub async fn start_on(dir: &Path, listen: &str, args: &[&str]) -> Relay {
        let log = DEFAULT_LOG.get().map_or(TEST_LOG, String::as_str);
        Relay::start_logged(dir, listen, args, log).await
    }

    /// [`Relay::start_on`] with its `RUST_LOG` filter.
    pub async fn start_logged(dir: &Path, listen: &str, args: &[&str], rust_log: &str) -> Relay {
        match Relay::try_start_logged(dir, listen, args, rust_log).await {
            Ok(relay) => relay,
            Err((status, log)) => panic!("relay did not start ({status:?}); its log:\n{log}"),
        }
    }

    /// Starts a relay that may refuse to start: `Err` holds its exit
    /// status (`None`: it neither started nor exited in time) and log.
    pub async fn try_start(dir: &Path, args: &[&str]) -> Result<Relay, (Option<ExitStatus>, String)> {
        Relay::try_start_logged(dir, "127.0.0.1:0", args, "info,flagstream_relay=debug").await
    }

    async fn try_start_logged(
        dir: &Path,
        listen: &str,
        args: &[&str],
        rust_log: &str,
    ) -> Result<Relay, (Option<ExitStatus>, String)> {
        std::fs::create_dir_all(dir).expect("relay dir");
        let stderr_log = dir.join(format!("relay-{}.log", std::process::id()));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&stderr_log).expect("log file");
        // FLAGSTREAM_RELAY_CPUS (e.g. "0") pins the relay with taskset, so a
        // load run can keep the relay and its clients on separate cores.
        let mut child = match std::env::var("FLAGSTREAM_RELAY_CPUS") {
            Ok(cpus) => {
                let mut c = Command::new("taskset");
                c.args(["-c", &cpus]).arg(relay_binary());
                c
            }
            Err(_) => Command::new(relay_binary()),
        };
        child
            .arg("serve")
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(["--listen", listen])
            .arg("--data-dir")
            .arg(dir.join("data"))
            // Tests use the demo environment unless they say otherwise.
            .args(if args.contains(&"--demo") { &[][..] } else { &["--demo", "true"][..] })
            .args(args)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = child.spawn().expect("relay binary starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(START_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("flagstream-relay listening") {
                    return Some(line);
                }
            }
            None
        })
        .await
        .ok()
        .flatten();
        let Some(line) = line else {
            let status =
                tokio::time::timeout(Duration::from_secs(5), child.wait()).await.ok().and_then(Result::ok);
            return Err((status, std::fs::read_to_string(&stderr_log).unwrap_or_default()));
        };
        // Keep draining stdout so the child never blocks on a full pipe;
        // what it says goes to the log file too.
        let mut out_log = std::fs::OpenOptions::new().append(true).open(&stderr_log).expect("log file");
        tokio::spawn(async move {
            use std::io::Write;
            while let Ok(Some(l)) = lines.next_line().await {
                // Best effort: the log is for diagnosis; a failed write
                // loses a line of it, nothing else.
                let _ = writeln!(out_log, "[stdout] {l}");
            }
        });
        let field = |name: &str| -> SocketAddr {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|a| a.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        Ok(Relay {
            grpc: field("grpc="),
            metrics: field("metrics="),
            admin: field("admin="),
            ofrep: line
                .split_whitespace()
                .find_map(|w| w.strip_prefix("ofrep="))
                .and_then(|a| a.parse().ok()),
            child,
            data_dir: dir.join("data"),
            stderr_log,
            admin_secret: None,
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("relay still running")
    }

    /// `http://addr` of the gRPC listener.
    pub fn url(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// Runs the `flagctl` built next to the relay binary against this
    /// relay with its admin token (no config file) in environment `env`,
    /// and returns its stdout; a failed run fails the test with its stderr.
    pub fn flagctl(&self, env: &str, args: &[&str]) -> String {
        self.flagctl_with_stderr(env, args).0
    }

    /// [`Relay::flagctl`], with what it wrote to stderr (the plan, a
    /// report's table) as well.
    pub fn flagctl_with_stderr(&self, env: &str, args: &[&str]) -> (String, String) {
        let bin = relay_binary().with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
        let out = std::process::Command::new(bin)
            .args([
                "--relay",
                &self.url(),
                "--token",
                &self.admin_token(),
                "--config",
                "/nonexistent/flagctl.toml",
            ])
            .args(["-e", env])
            .args(args)
            .output()
            .expect("flagctl runs");
        assert!(out.status.success(), "flagctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// The admin token the relay wrote on first start.
    pub fn admin_token(&self) -> String {
        if let Some(t) = &self.admin_secret {
            return t.clone();
        }
        std::fs::read_to_string(self.data_dir.join("admin-token"))
            .expect("admin token file")
            .trim()
            .to_owned()
    }

    /// The demo environment's SDK key.
    pub fn demo_key(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("demo-sdk-key")).expect("demo key file").trim().to_owned()
    }

    /// A fresh channel to the relay.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.url()).expect("url").connect().await.expect("relay reachable")
    }

    /// An authenticated admin client (on the Admin API's address).
    pub async fn admin(&self) -> Admin {
        let channel = Channel::from_shared(format!("http://{}", self.admin))
            .expect("url")
            .connect()
            .await
            .expect("admin listener reachable");
        AdminClient::with_interceptor(channel, Token(self.admin_token())).max_decoding_message_size(16 << 20)
    }

    /// An SDK client's builder for this relay, with the demo environment's
    /// key: add what the test needs, then `build()`.
    pub fn sdk(&self) -> flagstream::Builder {
        self.sdk_for(self.demo_key())
    }

    /// An SDK client's builder for this relay, with SDK key `key`.
    pub fn sdk_for(&self, key: impl Into<String>) -> flagstream::Builder {
        flagstream::Client::builder().endpoints([self.url()]).sdk_key(key)
    }

    /// A client of the demo environment at this relay, holding its data.
    pub async fn ready_sdk(&self) -> flagstream::Client {
        let client = self.sdk().build().expect("client configuration");
        let status = client.wait_ready(crate::STEP).await;
        assert!(status.has_data(), "the SDK never got data from {}: {status:?}", self.url());
        client
    }

    /// One flag's usage in environment `env` as `GetUsage` shows it (`None`:
    /// no usage of it yet).
    pub async fn flag_usage(&self, env: &str, key: &str) -> Option<pb::FlagUsageView> {
        let r = self
            .admin()
            .await
            .get_usage(pb::GetUsageRequest { environment: env.into(), key: key.into(), ..Default::default() })
            .await
            .expect("GetUsage answers")
            .into_inner();
        r.flags.into_iter().next()
    }

    /// Creates an environment; returns its SDK key.
    pub async fn create_env(&self, name: &str) -> String {
        self.admin()
            .await
            .create_environment(pb::CreateEnvironmentRequest {
                name: name.into(),
                description: String::new(),
            })
            .await
            .expect("create environment")
            .into_inner()
            .sdk_key
    }

    /// Creates environment `name` holding `flags` bool flags whose
    /// descriptions are `description_bytes` long, written in batches of
    /// 1,000 (one revision each, every one within the admin message
    /// limit); returns its SDK key. Used to make snapshots large.
    pub async fn create_filled_env(&self, name: &str, flags: usize, description_bytes: usize) -> String {
        let key = self.create_env(name).await;
        let mut admin = self.admin().await;
        for start in (0..flags).step_by(1_000) {
            let ops = (start..(start + 1_000).min(flags))
                .map(|i| {
                    let mut f = bool_flag(&format!("f-{i}"), true);
                    f.description = "d".repeat(description_bytes);
                    pb::BatchOp {
                        op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                            flag: Some(f),
                            expected_version: None,
                        })),
                    }
                })
                .collect();
            let req = pb::BatchRequest {
                environment: name.into(),
                ops,
                expected_revision: None,
                comment: String::new(),
            };
            admin.batch(req).await.expect("batch accepted");
        }
        key
    }

    /// A new admin token with role read on every environment and the
    /// replicate scope (what a replica relay presents); its secret.
    pub async fn replicate_token(&self, name: &str) -> String {
        self.admin()
            .await
            .create_token(pb::CreateTokenRequest {
                name: name.into(),
                role: pb::TokenRole::Read as i32,
                environments: vec![],
                replicate: true,
            })
            .await
            .expect("create a replicate token")
            .into_inner()
            .secret
    }

    /// The relay's `/metrics` text.
    pub async fn metrics_text(&self) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(self.metrics).await.expect("metrics port");
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    /// The value of one metric sample (`name{labels}`, exactly as
    /// exported). A sample the relay does not export fails the test: a
    /// renamed metric or label must not read as 0.
    pub async fn metric(&self, sample: &str) -> f64 {
        let text = self.metrics_text().await;
        sample_value(&text, sample)
            .unwrap_or_else(|| panic!("the relay exports no sample {sample}; its /metrics:\n{text}"))
    }

    /// The sample's value, `None` while the relay does not export it (for
    /// waits: a series that never appears times the wait out).
    pub async fn try_metric(&self, sample: &str) -> Option<f64> {
        sample_value(&self.metrics_text().await, sample)
    }

    /// [`Relay::metric`] for a series that may legitimately not exist yet
    /// (one created on its first event, with an open label set such as an
    /// environment name): 0 if absent. Say at the call why it may be.
    pub async fn metric_or_zero(&self, sample: &str) -> f64 {
        sample_value(&self.metrics_text().await, sample).unwrap_or(0.0)
    }

    /// The sum of every sample of the metric `name` (all label sets; 0
    /// when it has none yet). A metric the relay does not register at all
    /// fails the test.
    pub async fn metric_sum(&self, name: &str) -> f64 {
        let text = self.metrics_text().await;
        // OpenMetrics names a counter's family without its `_total`.
        let family = name.strip_suffix("_total").unwrap_or(name);
        assert!(
            text.lines().any(|l| l.strip_prefix("# TYPE ").and_then(|t| t.split(' ').next()) == Some(family)),
            "the relay registers no metric {name}; its /metrics:\n{text}"
        );
        text.lines()
            .filter(|l| {
                l.strip_prefix(name).is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// The process's resident memory now and at its peak, KiB (VmRSS,
    /// VmHWM).
    pub fn rss_kib(&self) -> (u64, u64) {
        // A missing file would report 0 KiB: a false figure, so fail.
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))
            .expect("the relay's /proc status");
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name)?.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends SIGTERM.
    pub fn sigterm(&self) {
        self.signal("-TERM");
    }

    /// Sends SIGKILL (a crash).
    pub fn kill9(&self) {
        self.signal("-KILL");
    }

    fn signal(&self, sig: &str) {
        let pid = self.child.id().expect("relay still running").to_string();
        let ok = std::process::Command::new("kill").args([sig, &pid]).status().expect("kill runs").success();
        assert!(ok, "kill {sig} {pid} failed");
    }

    /// Waits for the process to exit.
    pub async fn wait(&mut self, timeout: Duration) -> ExitStatus {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .expect("relay exits in time")
            .expect("wait works")
    }

    /// The relay's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }
}

/// The value of the sample `sample` (`name{labels}`) in a `/metrics`
/// text, if it is there.
fn sample_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(sample)?;
        // `name` must not match `name_created` or `name{...}`: the sample
        // is followed by its value.
        rest.strip_prefix(' ')?.split(' ').next()?.parse().ok()
    })
}

/// A bool flag whose fallthrough serves `variation`.
pub fn bool_flag(key: &str, on: bool) -> pb::Flag {
    let flag = flagstream::Flag {
        key: key.into(),
        flag_type: flagstream::FlagType::Bool,
        variations: vec![true.into(), false.into()],
        on,
        off_variation: 1,
        targets: vec![],
        rules: vec![],
        fallthrough: flagstream::model::Serve::variation(0),
        prerequisites: vec![],
        salt: String::new(),
        version: 0,
        revision: 0,
        description: String::new(),
        tags: vec![],
        owner: String::new(),
        client_visible: false,
    };
    flagstream::wire::flag_to_proto(&flag)
}

/// Puts a flag; returns the new revision.
pub async fn put(admin: &mut Admin, env: &str, flag: pb::Flag) -> Result<u64, tonic::Status> {
    let r = admin
        .put_flag(pb::PutFlagRequest {
            environment: env.into(),
            flag: Some(flag),
            expected_version: None,
            comment: String::new(),
        })
        .await?;
    Ok(r.into_inner().result.map_or(0, |r| r.revision))
}
