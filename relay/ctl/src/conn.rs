//! The connection to a relay's Admin API: settings from flags, the
//! environment and profiles, TLS, the token interceptor, confirmations and
//! the retry of writes refused for a rate quota.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use flagstream_proto::v1::admin_client::AdminClient;
use serde::Deserialize;
use tonic::metadata::MetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::failure::{CmdResult, Failure, exit};
use crate::output::Output;

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
pub(crate) struct Profile {
    pub(crate) relay: Option<String>,
    pub(crate) token: Option<flagstream::Secret>,
    pub(crate) token_file: Option<PathBuf>,
    pub(crate) env: Option<String>,
    pub(crate) ca_cert: Option<PathBuf>,
    pub(crate) client_cert: Option<PathBuf>,
    pub(crate) client_key: Option<PathBuf>,
}

pub(crate) fn read_pem(what: &str, p: &std::path::Path) -> Result<Vec<u8>, Failure> {
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

pub(crate) fn profile(args: &ConnArgs) -> Result<Profile, Failure> {
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
            // Empty = no environment given: every command that needs one
            // refuses it with a usage error (`lib.rs`), never a default.
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
            .get(flagstream_proto::metadata::RETRY_AFTER_MS)
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
