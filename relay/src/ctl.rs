//! `flagctl`: the operator CLI over the Admin API. This module owns the
//! command-line shape, the connection and profile settings, output
//! formatting and exit codes; `ctl/flag.rs` the flag and segment commands,
//! `ctl/gitops.rs` export/apply.

mod access;
mod eval;
mod flag;
mod gitops;
mod ramp;
mod segment;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use serde::Deserialize;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// Exit codes, documented in docs/CLI.md.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The relay failed or could not be reached.
    pub const ERROR: i32 = 1;
    /// Bad command line (clap).
    pub const USAGE: i32 = 2;
    /// Optimistic-concurrency conflict: someone changed it first.
    pub const CONFLICT: i32 = 3;
    /// No such environment, flag or segment.
    pub const NOT_FOUND: i32 = 4;
    /// Invalid input (validation, malformed file).
    pub const INVALID: i32 = 5;
    /// `--wait` timed out before every subscriber applied the revision.
    pub const INCOMPLETE: i32 = 6;
    /// Missing or wrong credentials.
    pub const UNAUTHENTICATED: i32 = 7;
    /// The user declined the confirmation.
    pub const DECLINED: i32 = 8;
    /// `audit verify`: the audit hash chain is broken.
    pub const BROKEN_CHAIN: i32 = 9;
}

/// flagctl: edit and inspect feature flags on a flagstream relay.
#[derive(Debug, Parser)]
#[command(name = "flagctl", version, about, propagate_version = true)]
pub struct Cli {
    /// Connection settings.
    #[command(flatten)]
    pub conn: ConnArgs,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Connection settings: flag, then environment variable, then the named
/// profile of `~/.config/flagstream/config.toml`, then defaults.
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// Relay URL [default: http://127.0.0.1:7070].
    #[arg(long, global = true, env = "FLAGSTREAM_RELAY")]
    pub relay: Option<String>,
    /// Admin token. Prefer FLAGSTREAM_TOKEN, `token_file` in a profile, or
    /// the default file: a `--token` value is visible to other users in the
    /// process list and lands in shell history [default: the contents of
    /// ./flagstream-data/admin-token].
    #[arg(long, global = true, env = "FLAGSTREAM_TOKEN", hide_env_values = true)]
    pub token: Option<flagstream::Secret>,
    /// File holding the admin token (the safest way to pass it: no shell
    /// history, no process list) [default: the profile's `token_file`, else
    /// ./flagstream-data/admin-token].
    #[arg(long, global = true, env = "FLAGSTREAM_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Environment. There is no default: commands that act on an
    /// environment need it here, in FLAGSTREAM_ENV or in the profile.
    /// (`token create` takes it repeatedly: the token's environments.)
    #[arg(long = "env", short = 'e', global = true, env = "FLAGSTREAM_ENV", action = clap::ArgAction::Append)]
    pub environment: Vec<String>,
    /// Profile in the config file.
    #[arg(long, global = true, env = "FLAGSTREAM_PROFILE")]
    pub profile: Option<String>,
    /// Config file [default: ~/.config/flagstream/config.toml].
    #[arg(long, global = true, env = "FLAGSTREAM_CLI_CONFIG")]
    pub config: Option<PathBuf>,
    /// PEM CA bundle to trust for an https:// relay (default: public roots).
    #[arg(long, global = true, env = "FLAGSTREAM_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// PEM client certificate for mutual TLS (with --client-key).
    #[arg(long, global = true, env = "FLAGSTREAM_CLIENT_CERT")]
    pub client_cert: Option<PathBuf>,
    /// PEM key of --client-cert.
    #[arg(long, global = true, env = "FLAGSTREAM_CLIENT_KEY")]
    pub client_key: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', global = true, value_enum, default_value = "table")]
    pub output: Output,
    /// Do not ask for confirmation.
    #[arg(long, short = 'y', global = true)]
    pub yes: bool,
    /// Connect timeout.
    #[arg(long, global = true, default_value = "3s", value_parser = humantime::parse_duration)]
    pub connect_timeout: Duration,
}

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human tables.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Environments.
    #[command(subcommand)]
    Env(EnvCmd),
    /// Flags.
    #[command(subcommand)]
    Flag(flag::FlagCmd),
    /// Segments.
    #[command(subcommand)]
    Segment(segment::SegmentCmd),
    /// Write files (a file or a directory of .yaml/.json) to the
    /// environment as one atomic revision, after showing the plan.
    Apply(gitops::ApplyArgs),
    /// Print the whole environment in the file format `apply` reads.
    Export,
    /// Evaluate a flag for a context on the relay (same engine as the SDK).
    Eval(eval::EvalArgs),
    /// Relay health, role, revisions and subscribers.
    Status,
    /// SDK keys of an environment.
    #[command(subcommand)]
    Key(access::KeyCmd),
    /// Named admin tokens.
    #[command(subcommand)]
    Token(access::TokenCmd),
    /// The audit log.
    #[command(subcommand)]
    Audit(access::AuditCmd),
    /// Follow an environment's changes live (subscribes like an SDK).
    Watch(WatchArgs),
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Print the CLI reference (docs/CLI.md) as Markdown.
    #[command(hide = true)]
    Markdown,
}

/// `env` subcommands.
#[derive(Debug, Subcommand)]
pub enum EnvCmd {
    /// Create an environment; prints its SDK key once.
    Create {
        /// Name.
        name: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List environments.
    List,
    /// Delete an environment and everything in it.
    Delete {
        /// Name.
        name: String,
    },
}

/// `watch` options.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// SDK key of the environment (watch subscribes like an SDK). Prefer
    /// --sdk-key-file or FLAGSTREAM_SDK_KEY: a value given here is visible
    /// to other users in the process list.
    #[arg(
        long,
        env = "FLAGSTREAM_SDK_KEY",
        hide_env_values = true,
        required_unless_present = "sdk_key_file"
    )]
    pub sdk_key: Option<flagstream::Secret>,
    /// File holding the SDK key (e.g. flagstream-data/demo-sdk-key); used
    /// instead of --sdk-key or FLAGSTREAM_SDK_KEY when given.
    #[arg(long, env = "FLAGSTREAM_SDK_KEY_FILE")]
    pub sdk_key_file: Option<PathBuf>,
    /// Stop after this many changes (default: run until interrupted).
    #[arg(long)]
    pub count: Option<u64>,
}

/// A command failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// One line for the user.
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Failure {
        use tonic::Code;
        let code = match s.code() {
            Code::FailedPrecondition | Code::Aborted => exit::CONFLICT,
            Code::NotFound => exit::NOT_FOUND,
            Code::InvalidArgument | Code::AlreadyExists => exit::INVALID,
            Code::Unauthenticated | Code::PermissionDenied => exit::UNAUTHENTICATED,
            _ => exit::ERROR,
        };
        let mut what = match s.code() {
            Code::Unavailable => format!("relay unavailable: {}", s.message()),
            Code::DeadlineExceeded => format!("relay did not answer in time: {}", s.message()),
            _ => s.message().to_owned(),
        };
        // A transport failure (no status from the relay): say what broke.
        if let Some(cause) = std::error::Error::source(&s) {
            let chain = flagstream::follow::error_chain(cause);
            what = format!("{what}: {chain}");
            if chain.contains("CertificateRequired") {
                what.push_str(" (the relay requires a client certificate: --client-cert and --client-key)");
            }
        }
        Failure::new(code, what)
    }
}

/// Result of a command.
pub type CmdResult = Result<(), Failure>;

/// An authenticated admin client plus the settings in force.
pub struct Conn {
    /// The client.
    pub admin: AdminClient<InterceptedService<Channel, Auth>>,
    /// Environment name.
    pub env: String,
    /// Output format.
    pub output: Output,
    /// Skip confirmations.
    pub yes: bool,
    /// Relay URL.
    pub relay: String,
}

/// Adds the token and the actor name to every admin request.
#[derive(Clone, Debug)]
pub struct Auth {
    token: flagstream::Secret,
    actor: String,
}

impl tonic::service::Interceptor for Auth {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Ok(v) = MetadataValue::try_from(format!("Bearer {}", self.token.expose())) {
            req.metadata_mut().insert("authorization", v);
        }
        if let Ok(v) = MetadataValue::try_from(self.actor.as_str()) {
            req.metadata_mut().insert("x-flagstream-actor", v);
        }
        Ok(req)
    }
}

/// `~/.config/flagstream/config.toml`: named profiles.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    #[serde(default)]
    default_profile: Option<String>,
    #[serde(default)]
    profiles: std::collections::BTreeMap<String, Profile>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Profile {
    relay: Option<String>,
    token: Option<flagstream::Secret>,
    token_file: Option<PathBuf>,
    env: Option<String>,
    ca_cert: Option<PathBuf>,
    client_cert: Option<PathBuf>,
    client_key: Option<PathBuf>,
}

fn read_pem(what: &str, p: &std::path::Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(p).map_err(|e| Failure::new(exit::USAGE, format!("{what} {}: {e}", p.display())))
}

/// The TLS configuration for an https:// relay.
fn tls_config(
    ca: Option<&std::path::Path>,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> Result<tonic::transport::ClientTlsConfig, Failure> {
    let mut c = tonic::transport::ClientTlsConfig::new();
    c = match ca {
        Some(p) => c.ca_certificate(tonic::transport::Certificate::from_pem(read_pem("--ca-cert", p)?)),
        None => c.with_webpki_roots(),
    };
    match (cert, key) {
        (Some(cert), Some(key)) => {
            c = c.identity(tonic::transport::Identity::from_pem(
                read_pem("--client-cert", cert)?,
                read_pem("--client-key", key)?,
            ));
        }
        (None, None) => {}
        _ => return Err(Failure::new(exit::USAGE, "--client-cert and --client-key: set both or neither")),
    }
    Ok(c)
}

fn profile(args: &ConnArgs) -> Result<Profile, Failure> {
    let path = match &args.config {
        Some(p) => Some(p.clone()),
        None => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config/flagstream/config.toml")),
    };
    let Some(path) = path.filter(|p| p.exists()) else {
        return match &args.profile {
            Some(p) => Err(Failure::new(exit::USAGE, format!("profile {p:?}: no config file"))),
            None => Ok(Profile::default()),
        };
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| Failure::new(exit::USAGE, format!("{}: {e}", path.display())))?;
    let file: ConfigFile = toml::from_str(&text)
        .map_err(|e| Failure::new(exit::USAGE, format!("{}: {}", path.display(), e.message())))?;
    let name = args.profile.clone().or(file.default_profile.clone());
    match name {
        None => Ok(Profile::default()),
        Some(n) => {
            file.profiles.get(&n).cloned().ok_or_else(|| {
                Failure::new(exit::USAGE, format!("profile {n:?} is not in {}", path.display()))
            })
        }
    }
}

impl Conn {
    /// Connects with the settings in force; a relay that is down fails
    /// within the connect timeout.
    pub async fn open(args: &ConnArgs) -> Result<Conn, Failure> {
        let p = profile(args)?;
        let relay = args.relay.clone().or(p.relay).unwrap_or_else(|| "http://127.0.0.1:7070".into());
        // An empty FLAGSTREAM_TOKEN counts as unset.
        let token = match args.token.clone().filter(|t| !t.is_empty()).or(p.token) {
            Some(t) => t,
            None => {
                let file = args
                    .token_file
                    .clone()
                    .or(p.token_file)
                    .unwrap_or_else(|| PathBuf::from("flagstream-data/admin-token"));
                std::fs::read_to_string(&file).map(|t| flagstream::Secret::new(t.trim())).map_err(|e| {
                    Failure::new(
                        exit::UNAUTHENTICATED,
                        format!("no admin token: pass --token or FLAGSTREAM_TOKEN ({}: {e})", file.display()),
                    )
                })?
            }
        };
        let mut ep = Endpoint::from_shared(relay.clone())
            .map_err(|e| Failure::new(exit::USAGE, format!("--relay {relay:?}: {e}")))?
            .connect_timeout(args.connect_timeout)
            .timeout(Duration::from_secs(30));
        if relay.starts_with("https://") {
            let tls = tls_config(
                args.ca_cert.as_deref().or(p.ca_cert.as_deref()),
                args.client_cert.as_deref().or(p.client_cert.as_deref()),
                args.client_key.as_deref().or(p.client_key.as_deref()),
            )?;
            ep = ep.tls_config(tls).map_err(|e| Failure::new(exit::USAGE, format!("TLS: {}", chain(&e))))?;
        }
        let channel = tokio::time::timeout(args.connect_timeout, ep.connect())
            .await
            .map_err(|_| {
                Failure::new(
                    exit::ERROR,
                    format!("relay {relay} did not answer within {:?}", args.connect_timeout),
                )
            })?
            .map_err(|e| Failure::new(exit::ERROR, format!("cannot reach relay {relay}: {}", chain(&e))))?;
        let actor = std::env::var("USER").unwrap_or_else(|_| "flagctl".into());
        let admin = AdminClient::with_interceptor(channel, Auth { token, actor })
            .max_decoding_message_size(64 << 20)
            .max_encoding_message_size(8 << 20);
        Ok(Conn {
            admin,
            env: args.environment.last().cloned().or(p.env).unwrap_or_default(),
            output: args.output,
            yes: args.yes,
            relay,
        })
    }

    /// Asks "proceed?" on a terminal unless `--yes`; refuses on a
    /// non-terminal without `--yes` (scripts must say so explicitly).
    pub fn confirm(&self, what: &str) -> CmdResult {
        if self.yes {
            return Ok(());
        }
        if !std::io::stdin().is_terminal() {
            return Err(Failure::new(
                exit::DECLINED,
                format!("{what}: not a terminal; pass --yes to confirm"),
            ));
        }
        eprint!("{what}? [y/N] ");
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?;
        if matches!(answer.trim(), "y" | "Y" | "yes") {
            Ok(())
        } else {
            Err(Failure::new(exit::DECLINED, "not confirmed"))
        }
    }
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Most tries of a write the relay refuses for a rate quota.
const MAX_TRIES: u32 = 5;

/// Runs an admin write; while the relay refuses it with RESOURCE_EXHAUSTED
/// and a `flagstream-retry-after-ms` hint (a rate quota: nothing was
/// written), waits the hint plus a random `[0, hint]` and tries again, up
/// to 5 tries. Safe because every flagctl write carries its expected
/// version or revision. Any other outcome is returned as it is.
pub(crate) async fn with_retry<T, F, Fut>(mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, tonic::Status>>,
{
    let mut tries = 1;
    loop {
        let status = match call().await {
            Err(s) if s.code() == tonic::Code::ResourceExhausted && tries < MAX_TRIES => s,
            other => return other,
        };
        let hint = status
            .metadata()
            .get(crate::error::RETRY_AFTER_MS)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let Some(hint) = hint else { return Err(status) };
        let hint = hint.min(60_000);
        let wait = hint + rand::Rng::random_range(&mut rand::rng(), 0..=hint);
        eprintln!(
            "relay busy: {}; retrying in {wait} ms (try {} of {MAX_TRIES})",
            status.message(),
            tries + 1
        );
        tokio::time::sleep(Duration::from_millis(wait)).await;
        tries += 1;
    }
}

/// Prints a serialisable value as JSON or YAML.
pub(crate) fn print_data<T: serde::Serialize>(output: Output, v: &T) -> CmdResult {
    let text = match output {
        Output::Yaml => serde_yaml_ng::to_string(v).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?,
        _ => serde_json::to_string_pretty(v).map_err(|e| Failure::new(exit::ERROR, e.to_string()))? + "\n",
    };
    print!("{text}");
    Ok(())
}

/// Runs flagctl with the process arguments; returns the exit code.
pub async fn main_entry() -> i32 {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { exit::USAGE } else { exit::OK };
            // Printing help or the error can only fail on a closed stdout.
            if let Err(pe) = e.print() {
                eprintln!("flagctl: {pe}");
            }
            return code;
        }
    };
    match run(cli).await {
        Ok(()) => exit::OK,
        Err(f) => {
            eprintln!("flagctl: {}", f.message);
            f.code
        }
    }
}

async fn run(cli: Cli) -> CmdResult {
    match cli.command {
        Command::Completions { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "flagctl", &mut std::io::stdout());
            Ok(())
        }
        Command::Markdown => {
            print!("{}", markdown());
            Ok(())
        }
        Command::Watch(w) => watch(&cli.conn, w).await,
        command => {
            let needs_env = matches!(
                command,
                Command::Flag(_)
                    | Command::Segment(_)
                    | Command::Apply(_)
                    | Command::Export
                    | Command::Eval(_)
                    | Command::Key(_)
                    | Command::Audit(_)
            );
            let token_create = matches!(command, Command::Token(access::TokenCmd::Create { .. }));
            if cli.conn.environment.len() > 1 && !token_create {
                return Err(Failure::new(
                    exit::USAGE,
                    "-e/--env given more than once (only `token create` takes several)",
                ));
            }
            let mut conn = Conn::open(&cli.conn).await?;
            if needs_env && conn.env.is_empty() {
                // Never a silent default: a write must land where the
                // operator said.
                return Err(Failure::new(
                    exit::USAGE,
                    "no environment: pass -e/--env ENV, set FLAGSTREAM_ENV, or set `env` in your profile",
                ));
            }
            match command {
                Command::Env(e) => env_cmd(&mut conn, e).await,
                Command::Flag(f) => flag::flag_cmd(&mut conn, f).await,
                Command::Segment(s) => segment::segment_cmd(&mut conn, s).await,
                Command::Apply(a) => gitops::apply(&mut conn, a).await,
                Command::Export => gitops::export(&mut conn).await,
                Command::Eval(e) => eval::eval(&mut conn, e).await,
                Command::Status => status(&mut conn).await,
                Command::Key(k) => access::key_cmd(&mut conn, k).await,
                Command::Token(t) => access::token_cmd(&mut conn, t, cli.conn.environment.clone()).await,
                Command::Audit(a) => access::audit_cmd(&mut conn, a).await,
                Command::Completions { .. } | Command::Markdown | Command::Watch(_) => Ok(()),
            }
        }
    }
}

/// The CLI reference, generated from the clap definitions.
pub fn markdown() -> String {
    clap_markdown::help_markdown::<Cli>()
}

async fn env_cmd(conn: &mut Conn, cmd: EnvCmd) -> CmdResult {
    match cmd {
        EnvCmd::Create { name, description } => {
            let r = conn
                .admin
                .create_environment(pb::CreateEnvironmentRequest { name: name.clone(), description })
                .await?
                .into_inner();
            println!("created environment {name}");
            println!("SDK key (shown once): {}", r.sdk_key);
        }
        EnvCmd::List => {
            let envs = conn
                .admin
                .list_environments(pb::ListEnvironmentsRequest::default())
                .await?
                .into_inner()
                .environments;
            match conn.output {
                Output::Table => {
                    let mut t = comfy_table::Table::new();
                    t.load_preset(comfy_table::presets::NOTHING);
                    t.set_header(["NAME", "REVISION", "FLAGS", "SEGMENTS", "EPOCH"]);
                    for e in &envs {
                        t.add_row([
                            e.name.clone(),
                            e.revision.to_string(),
                            e.flag_count.to_string(),
                            e.segment_count.to_string(),
                            e.epoch.clone(),
                        ]);
                    }
                    println!("{t}");
                }
                o => {
                    let v: Vec<_> = envs
                        .iter()
                        .map(|e| serde_json::json!({"name": e.name, "revision": e.revision, "flags": e.flag_count, "segments": e.segment_count, "epoch": e.epoch}))
                        .collect();
                    print_data(o, &v)?;
                }
            }
        }
        EnvCmd::Delete { name } => {
            conn.confirm(&format!("delete environment {name:?} and all its flags"))?;
            let r = conn
                .admin
                .delete_environment(pb::DeleteEnvironmentRequest {
                    name: name.clone(),
                    expected_revision: None,
                })
                .await?
                .into_inner();
            println!("deleted environment {name}");
            if !r.audit_archive.is_empty() {
                println!(
                    "its audit log is kept as {0} (flagctl -e {0} audit verify | audit log)",
                    r.audit_archive
                );
            }
        }
    }
    Ok(())
}

async fn status(conn: &mut Conn) -> CmdResult {
    let s = conn.admin.status(pb::StatusRequest {}).await?.into_inner();
    let replica = s.role == pb::RelayRole::Replica as i32;
    let role = match pb::RelayRole::try_from(s.role) {
        Ok(pb::RelayRole::Replica) => "replica",
        Ok(pb::RelayRole::Shared) => "shared database",
        _ => "primary",
    };
    let staleness = |e: &pb::EnvironmentStatus| {
        if !replica {
            "-".to_owned()
        } else if e.upstream_live {
            format!("live ({:?})", Duration::from_millis(e.staleness_ms))
        } else {
            format!("DOWN, data {:?} old", Duration::from_millis(e.staleness_ms - e.staleness_ms % 1000))
        }
    };
    match conn.output {
        Output::Table => {
            println!(
                "relay     {} ({role}, version {}, {})",
                conn.relay,
                s.version,
                if s.ready { "ready" } else { "not ready" }
            );
            if replica {
                println!("upstream  {}", s.upstream);
            }
            if !s.primary.is_empty() {
                println!("primary   {}", s.primary);
            }
            println!("uptime    {:?}", Duration::from_millis(s.uptime_ms));
            println!("subscribers {}", s.subscribers_total);
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::NOTHING);
            t.set_header(["ENVIRONMENT", "HEAD", "SUBSCRIBERS", "REPLICAS", "UPSTREAM", "CHECKSUM"]);
            for e in &s.environments {
                t.add_row([
                    e.name.clone(),
                    e.head_revision.to_string(),
                    e.subscribers.to_string(),
                    e.relay_subscribers.to_string(),
                    staleness(e),
                    format!("{:016x}", e.checksum),
                ]);
            }
            println!("{t}");
            let replicas: Vec<_> =
                s.environments.iter().flat_map(|e| e.replicas.iter().map(move |r| (&e.name, r))).collect();
            if !replicas.is_empty() {
                let mut t = comfy_table::Table::new();
                t.load_preset(comfy_table::presets::NOTHING);
                t.set_header(["REPLICA", "ENVIRONMENT", "APPLIED", "LAG", "SDKS BELOW", "TOKEN", "VERSION"]);
                for (env, r) in replicas {
                    t.add_row([
                        r.address.clone(),
                        env.clone(),
                        r.applied_revision.to_string(),
                        format!("{} revisions", r.lag_revisions),
                        r.subtree_subscribers.to_string(),
                        r.token.clone(),
                        r.version.clone(),
                    ]);
                }
                println!("{t}");
            }
        }
        o => {
            let envs: Vec<_> = s
                .environments
                .iter()
                .map(|e| {
                    let replicas: Vec<_> = e
                        .replicas
                        .iter()
                        .map(|r| serde_json::json!({"address": r.address, "applied_revision": r.applied_revision, "lag_revisions": r.lag_revisions, "subtree_subscribers": r.subtree_subscribers, "token": r.token, "version": r.version}))
                        .collect();
                    serde_json::json!({"name": e.name, "head_revision": e.head_revision, "subscribers": e.subscribers, "checksum": format!("{:016x}", e.checksum), "staleness_ms": e.staleness_ms, "upstream_live": e.upstream_live, "replicas": replicas})
                })
                .collect();
            print_data(
                o,
                &serde_json::json!({"relay": conn.relay, "role": role, "ready": s.ready, "version": s.version, "upstream": s.upstream, "primary": s.primary, "subscribers": s.subscribers_total, "environments": envs}),
            )?;
        }
    }
    Ok(())
}

async fn watch(args: &ConnArgs, w: WatchArgs) -> CmdResult {
    let p = profile(args)?;
    let relay = args.relay.clone().or(p.relay).unwrap_or_else(|| "http://127.0.0.1:7070".into());
    let key = match (&w.sdk_key_file, w.sdk_key) {
        (Some(file), _) => {
            let key = std::fs::read_to_string(file)
                .map_err(|e| Failure::new(exit::USAGE, format!("--sdk-key-file {}: {e}", file.display())))?;
            if key.trim().is_empty() {
                let msg = format!("--sdk-key-file {}: the file is empty", file.display());
                return Err(Failure::new(exit::USAGE, msg));
            }
            flagstream::Secret::new(key.trim())
        }
        (None, Some(key)) => key,
        (None, None) => return Err(Failure::new(exit::USAGE, "watch needs --sdk-key-file or --sdk-key")),
    };
    let mut builder = flagstream::Client::builder().endpoints([relay.clone()]).sdk_key(key.expose());
    if let Some(ca) = args.ca_cert.as_deref().or(p.ca_cert.as_deref()) {
        builder = builder.tls_ca_pem(read_pem("--ca-cert", ca)?);
    }
    match (
        args.client_cert.as_deref().or(p.client_cert.as_deref()),
        args.client_key.as_deref().or(p.client_key.as_deref()),
    ) {
        (Some(cert), Some(key)) => {
            builder =
                builder.tls_identity_pem(read_pem("--client-cert", cert)?, read_pem("--client-key", key)?);
        }
        (None, None) => {}
        _ => return Err(Failure::new(exit::USAGE, "--client-cert and --client-key: set both or neither")),
    }
    let client = builder.build().map_err(|e| Failure::new(exit::USAGE, e.to_string()))?;
    // Listening before the first data: no change between the first
    // snapshot and the loop below is missed (what the first line states is
    // skipped below).
    let mut changes = client.changes();
    let status = client.wait_ready(args.connect_timeout.max(Duration::from_secs(1))).await;
    if !status.has_data() {
        return Err(Failure::new(exit::ERROR, format!("cannot subscribe to {relay}: {status:?}")));
    }
    let start = client.snapshot();
    println!("watching {relay} at revision {} ({} flags)", start.revision(), start.len());
    let mut seen = 0;
    while w.count.is_none_or(|c| seen < c) {
        match changes.recv().await {
            Ok(c) if c.revision <= start.revision() => {}
            Ok(c) => {
                seen += 1;
                let snap = client.snapshot();
                for key in c.flags.iter() {
                    match snap.flag(key) {
                        Some(f) => println!(
                            "revision {}: {key} version {} {}",
                            c.revision,
                            f.version,
                            if f.on { "on" } else { "off" }
                        ),
                        None => println!("revision {}: {key} deleted", c.revision),
                    }
                }
            }
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => println!("(skipped {n} revisions)"),
            Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
        }
    }
    Ok(())
}

/// Waits for propagation of `revision` (for `--wait`), printing progress.
pub(crate) async fn wait_propagation(conn: &mut Conn, revision: u64, timeout: Duration) -> CmdResult {
    let req = pb::WatchPropagationRequest {
        environment: conn.env.clone(),
        revision: Some(revision),
        min_interval_ms: 200,
    };
    let mut stream = conn.admin.watch_propagation(req).await?.into_inner();
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = None;
    loop {
        match tokio::time::timeout_at(deadline, stream.message()).await {
            Err(_) => break,
            Ok(Err(s)) => return Err(s.into()),
            Ok(Ok(None)) => break,
            Ok(Ok(Some(m))) => {
                if let Some(p) = m.propagation {
                    let relays = if p.relays_total > 0 {
                        format!(" ({} of {} replicas reporting)", p.relays_reporting, p.relays_total)
                    } else {
                        String::new()
                    };
                    eprintln!(
                        "revision {}: {} of {} subscribers{relays}",
                        p.revision, p.subscribers_acked, p.subscribers_total
                    );
                    // Done once every subscriber counted acked and every
                    // replica reported (else the count is incomplete).
                    let done =
                        p.subscribers_acked >= p.subscribers_total && p.relays_reporting >= p.relays_total;
                    last = Some(p);
                    if done {
                        break;
                    }
                }
            }
        }
    }
    let p =
        last.ok_or_else(|| Failure::new(exit::INCOMPLETE, "no propagation information before the timeout"))?;
    let summary = format!(
        "revision {} reached {} of {} subscribers in {} ms (p99){}",
        p.revision,
        p.subscribers_acked,
        p.subscribers_total,
        p.latency_p99_ms,
        if p.relays_total > 0 {
            format!(", {} of {} replicas reporting", p.relays_reporting, p.relays_total)
        } else {
            String::new()
        }
    );
    println!("{summary}");
    if p.subscribers_acked < p.subscribers_total || p.relays_reporting < p.relays_total {
        return Err(Failure::new(
            exit::INCOMPLETE,
            format!("propagation incomplete after {timeout:?}: {summary}"),
        ));
    }
    Ok(())
}
