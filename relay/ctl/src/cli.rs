//! The command-line shape: every command, subcommand and global option
//! (clap definitions; docs/CLI.md is generated from them).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::output::Output;
use crate::{access, eval, flag, gitops, segment};

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
