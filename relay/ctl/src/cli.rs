//! The command-line shape: every command, subcommand and global option
//! (clap definitions; docs/CLI.md is generated from them).

use clap::{Parser, Subcommand};

use crate::conn::ConnArgs;
use crate::env::EnvCmd;
use crate::watch::WatchArgs;
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
    /// Import another flag system's flags and segments into the
    /// environment, exactly or not at all: the report says, per flag and
    /// segment, imported exactly or not imported and why; the write is one
    /// revision (`--dry-run` shows the plan). docs/MIGRATION.md.
    #[command(subcommand)]
    Import(crate::import::ImportCmd),
    /// Evaluate a flag for a context on the relay (same engine as the SDK).
    Eval(eval::EvalArgs),
    /// Relay health, role, revisions and subscribers.
    Status {
        /// Every relay of the tree below (and, on a shared database, beside)
        /// this one: version, uptime, memory, streams, and per environment
        /// the revision, lag, data age and SDKs. Needs a token that sees
        /// every environment.
        #[arg(long)]
        tree: bool,
    },
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
