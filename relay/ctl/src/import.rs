//! `flagctl import`: another flag system's data as this environment's
//! flags and segments, exactly or not at all (docs/MIGRATION.md). Each
//! source's reading is its own module (`launchdarkly.rs`), pure; here: the
//! command, the report (one line per flag and segment: imported exactly,
//! or not imported with the construct and the reason), and the write
//! through `apply`'s plan (one atomic revision; the same file again is a
//! no-op, a changed file shows the difference).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use flagstream::FlagSet;
use serde::Serialize;

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit};
use crate::gitops::{PlanArgs, apply_set};
use crate::output::{Output, print_data};

mod launchdarkly;

/// `import` subcommands.
#[derive(Debug, Subcommand)]
pub enum ImportCmd {
    /// LaunchDarkly's server-side SDK data of one environment (`curl -sH
    /// "Authorization: $LD_SDK_KEY" https://sdk.launchdarkly.com/sdk/latest-all`):
    /// flags and segments, rollouts keeping LaunchDarkly's bucketing.
    Launchdarkly(ImportArgs),
}

/// What an import reads and how it writes.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// The source's JSON file.
    pub file: PathBuf,
    /// How the plan is written.
    #[command(flatten)]
    pub write: PlanArgs,
}

/// What became of one flag or segment.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case", tag = "result", content = "reason")]
pub(crate) enum Outcome {
    /// Imported with its meaning unchanged.
    Exact,
    /// Not imported: the construct and why.
    Skipped(String),
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Line {
    pub kind: &'static str,
    pub key: String,
    #[serde(flatten)]
    pub outcome: Outcome,
}

impl Line {
    pub(crate) fn new(kind: &'static str, key: &str, outcome: Outcome) -> Line {
        Line { kind, key: key.to_owned(), outcome }
    }
}

/// Leaves out what flagstream's validation refuses (a regular expression
/// LaunchDarkly never matched, a reference to a segment left out, ...),
/// each with the validator's words, until the rest validates.
fn keep_valid(set: &mut FlagSet, report: &mut [Line]) -> Result<(), Failure> {
    for _ in 0..8 {
        let Err(errors) = flagstream::validate::flag_set(set, &flagstream::Limits::default()) else {
            return Ok(());
        };
        let mut dropped = false;
        for e in &errors.0 {
            for (kind, prefix) in [("flag", "flags[\""), ("segment", "segments[\"")] {
                let Some(rest) = e.path.strip_prefix(prefix) else { continue };
                let Some(key) = rest.split("\"]").next() else { continue };
                let why = format!("{}: {}", e.path, e.message);
                if kind == "flag" {
                    set.flags.retain(|f| f.key != key);
                } else {
                    set.segments.retain(|s| s.key != key);
                }
                if let Some(line) = report.iter_mut().find(|l| l.kind == kind && l.key == key)
                    && matches!(line.outcome, Outcome::Exact)
                {
                    line.outcome = Outcome::Skipped(format!("flagstream's validation: {why}"));
                    dropped = true;
                }
            }
        }
        if !dropped {
            return Err(Failure::new(exit::INVALID, errors.to_string()));
        }
    }
    Err(Failure::new(exit::INVALID, "the imported set does not validate"))
}

fn print_report(output: Output, source: &str, report: &[Line]) -> CmdResult {
    if output == Output::Table {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::NOTHING);
        t.set_header(["KIND", "KEY", "RESULT", "WHY NOT"]);
        for l in report {
            let (result, why) = match &l.outcome {
                Outcome::Exact => ("imported exactly", String::new()),
                Outcome::Skipped(why) => ("not imported", why.clone()),
            };
            t.add_row([l.kind.to_owned(), l.key.clone(), result.to_owned(), why]);
        }
        eprintln!("{t}");
        let exact = report.iter().filter(|l| matches!(l.outcome, Outcome::Exact)).count();
        eprintln!("from {source}: {exact} imported exactly, {} not imported", report.len() - exact);
        Ok(())
    } else {
        print_data(output, &report)
    }
}

/// Runs an `import` subcommand.
pub(crate) async fn import_cmd(conn: &mut Conn, cmd: ImportCmd) -> CmdResult {
    let ImportCmd::Launchdarkly(a) = cmd;
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", a.file.display())))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::new(exit::INVALID, format!("{}: not JSON: {e}", a.file.display())))?;
    let (mut set, mut report) = launchdarkly::convert(&doc)
        .map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", a.file.display())))?;
    keep_valid(&mut set, &mut report)?;
    print_report(conn.output, "LaunchDarkly", &report)?;
    apply_set(conn, set, false, &a.write).await
}
