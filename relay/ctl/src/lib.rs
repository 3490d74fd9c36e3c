//! `flagctl`: the operator CLI over a relay's Admin API. It depends on the
//! wire contract, the evaluation core (through the SDK without its cache)
//! and tonic, and on nothing of the relay's storage.
//!
//! Modules, bottom up: [`failure`] (exit codes, the one `Status` mapping),
//! `output`, `cli` (the clap shape), `conn` (connection, profiles,
//! retries); then one module per command family: `env`, `status`,
//! `watch`, `flag` (with `edit` for reading and writing one flag, `file`
//! for flag files and diffs, `ramp`), `segment`, `gitops` (export/apply),
//! `eval`, `access` (keys, tokens, audit), and `propagation` (`--wait`).

mod access;
mod cli;
mod conn;
mod edit;
mod env;
mod eval;
pub mod failure;
mod file;
mod flag;
mod gitops;
mod import;
mod output;
mod propagation;
mod ramp;
mod segment;
mod status;
mod usage;
mod watch;

use clap::Parser;

pub use cli::{Cli, Command};
pub use conn::{Auth, Conn, ConnArgs};
pub use env::EnvCmd;
pub use failure::{CmdResult, Failure, exit};
pub use output::Output;
pub use watch::WatchArgs;

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
        Command::Watch(w) => watch::watch(&cli.conn, w).await,
        command => {
            let needs_env = matches!(
                command,
                Command::Flag(_)
                    | Command::Segment(_)
                    | Command::Apply(_)
                    | Command::Import(_)
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
                Command::Env(e) => env::env_cmd(&mut conn, e).await,
                Command::Flag(f) => flag::flag_cmd(&mut conn, f).await,
                Command::Segment(s) => segment::segment_cmd(&mut conn, s).await,
                Command::Apply(a) => gitops::apply(&mut conn, a).await,
                Command::Export => gitops::export(&mut conn).await,
                Command::Import(i) => import::import_cmd(&mut conn, i).await,
                Command::Eval(e) => eval::eval(&mut conn, e).await,
                Command::Status { tree: false } => status::status(&mut conn).await,
                Command::Status { tree: true } => status::tree(&mut conn).await,
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
