//! `flagctl import`: another flag system's data as this environment's
//! flags and segments, exactly or not at all (docs/MIGRATION.md). Each
//! source's reading is its own module (`launchdarkly.rs`, `unleash.rs`),
//! pure; here: the
//! command, the report (one line per flag and segment: imported exactly,
//! or not imported with the construct and the reason), and the write
//! through `apply`'s plan (one atomic revision; the same file again is a
//! no-op, a changed file shows the difference).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use clap::{Args, Subcommand};
use flagstream::FlagSet;
use serde::Serialize;

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit};
use crate::gitops::{PlanArgs, apply_set};
use crate::output::{Output, print_data};

mod launchdarkly;
mod unleash;

/// `import` subcommands.
#[derive(Debug, Subcommand)]
pub enum ImportCmd {
    /// LaunchDarkly's server-side SDK data of one environment (`curl -sH
    /// "Authorization: $LD_SDK_KEY" https://sdk.launchdarkly.com/sdk/latest-all`):
    /// flags and segments, rollouts keeping LaunchDarkly's bucketing.
    Launchdarkly(ApproximateArgs),
    /// Unleash's client features document of one environment (`curl -sH
    /// "Authorization: $UNLEASH_BACKEND_TOKEN"
    /// https://unleash.example.com/api/client/features`): each feature as
    /// the bool flag `<name>` and, with variants, the JSON flag
    /// `<name>.variant`; percentages keeping Unleash's bucketing.
    Unleash(ApproximateArgs),
}

/// What an import reads, how it writes, and whether it may approximate.
#[derive(Debug, Args)]
pub struct ApproximateArgs {
    #[command(flatten)]
    pub import: ImportArgs,
    /// Carry what has no exact equivalent as the nearest one, said on its
    /// line of the report (LaunchDarkly: an on flag without an off
    /// variation gets its last; Unleash: a random percentage becomes a
    /// steady share of context keys).
    #[arg(long)]
    pub approximate: bool,
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
    /// Imported with a stated change of meaning (`--approximate` only).
    Approximate(String),
    /// Not imported: the construct and why.
    Skipped(String),
    /// Not an item: what the import asks of the application.
    Note(String),
}

/// The report line each written item belongs to, where it is not the
/// item's own (an Unleash feature's flags and segments are one line).
#[derive(Debug, Default)]
pub(crate) struct Owners {
    /// Flag key → (line kind, line key).
    pub flags: BTreeMap<String, (&'static str, String)>,
    /// Segment key → (line kind, line key).
    pub segments: BTreeMap<String, (&'static str, String)>,
    /// Segments the import wrote to express something else (a strategy's
    /// percentage, a negation): dropped when nothing kept refers to them.
    pub generated: BTreeSet<String>,
}

/// Drops generated segments no flag or segment refers to any more (their
/// feature was left out, or its strategy never matches).
fn prune_generated(set: &mut FlagSet, generated: &BTreeSet<String>) {
    loop {
        let referred: BTreeSet<&str> = set
            .flags
            .iter()
            .flat_map(|f| f.rules.iter().flat_map(|r| &r.clauses))
            .chain(set.segments.iter().flat_map(|s| s.rules.iter().flat_map(|r| &r.clauses)))
            .filter(|c| c.op == flagstream::model::Operator::SegmentMatch)
            .flat_map(|c| c.values.iter().filter_map(|v| v.as_str()))
            .collect();
        let unused: BTreeSet<String> = set
            .segments
            .iter()
            .filter(|s| generated.contains(&s.key) && !referred.contains(s.key.as_str()))
            .map(|s| s.key.clone())
            .collect();
        if unused.is_empty() {
            return;
        }
        set.segments.retain(|s| !unused.contains(&s.key));
    }
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
fn keep_valid(set: &mut FlagSet, report: &mut [Line], owners: &Owners) -> Result<(), Failure> {
    // Each round removes at least one item, or fails.
    for _ in 0..=set.flags.len() + set.segments.len() {
        let Err(errors) = flagstream::validate::flag_set(set, &flagstream::Limits::default()) else {
            return Ok(());
        };
        let mut dropped = false;
        for e in &errors.0 {
            for (kind, prefix) in [("flag", "flags[\""), ("segment", "segments[\"")] {
                let Some(rest) = e.path.strip_prefix(prefix) else { continue };
                let Some(key) = rest.split("\"]").next() else { continue };
                let why = format!("{}: {}", e.path, e.message);
                let owner = if kind == "flag" { owners.flags.get(key) } else { owners.segments.get(key) };
                let (line_kind, line_key) = owner.cloned().unwrap_or((kind, key.to_owned()));
                // Everything of that line goes: the item, the line's own
                // item, and what else belongs to it (a feature's other flag
                // and segments, a segment's negations).
                let of_line =
                    |item: &str, item_kind: &str, map: &BTreeMap<String, (&'static str, String)>| {
                        (item_kind == kind && item == key)
                            || (item_kind == line_kind && item == line_key)
                            || map.get(item).is_some_and(|(k, l)| *k == line_kind && *l == line_key)
                    };
                let before = set.flags.len() + set.segments.len();
                set.flags.retain(|f| !of_line(&f.key, "flag", &owners.flags));
                set.segments.retain(|s| !of_line(&s.key, "segment", &owners.segments));
                dropped |= set.flags.len() + set.segments.len() < before;
                if let Some(line) = report.iter_mut().find(|l| l.kind == line_kind && l.key == line_key)
                    && matches!(line.outcome, Outcome::Exact | Outcome::Approximate(_))
                {
                    line.outcome = Outcome::Skipped(format!("flagstream's validation: {why}"));
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
        t.set_header(["KIND", "KEY", "RESULT", "DETAIL"]);
        for l in report {
            let (result, why) = match &l.outcome {
                Outcome::Exact => ("imported exactly", String::new()),
                Outcome::Approximate(how) => ("imported approximately", how.clone()),
                Outcome::Skipped(why) => ("not imported", why.clone()),
                Outcome::Note(what) => ("note", what.clone()),
            };
            t.add_row([l.kind.to_owned(), l.key.clone(), result.to_owned(), why]);
        }
        eprintln!("{t}");
        let count = |f: fn(&Outcome) -> bool| report.iter().filter(|l| f(&l.outcome)).count();
        let exact = count(|o| matches!(o, Outcome::Exact));
        let approximate = count(|o| matches!(o, Outcome::Approximate(_)));
        let skipped = count(|o| matches!(o, Outcome::Skipped(_)));
        if approximate == 0 {
            eprintln!("from {source}: {exact} imported exactly, {skipped} not imported");
        } else {
            eprintln!(
                "from {source}: {exact} imported exactly, {approximate} approximately, {skipped} not imported"
            );
        }
        Ok(())
    } else {
        print_data(output, &report)
    }
}

/// Runs an `import` subcommand.
pub(crate) async fn import_cmd(conn: &mut Conn, cmd: ImportCmd) -> CmdResult {
    let (a, source) = match &cmd {
        ImportCmd::Launchdarkly(l) => (&l.import, "LaunchDarkly"),
        ImportCmd::Unleash(u) => (&u.import, "Unleash"),
    };
    let text = std::fs::read_to_string(&a.file)
        .map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", a.file.display())))?;
    let doc: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| Failure::new(exit::INVALID, format!("{}: not JSON: {e}", a.file.display())))?;
    let converted = match &cmd {
        ImportCmd::Launchdarkly(l) => {
            launchdarkly::convert(&doc, l.approximate).map(|(set, report)| (set, report, Owners::default()))
        }
        ImportCmd::Unleash(u) => unleash::convert(&doc, u.approximate),
    };
    let (mut set, mut report, owners) =
        converted.map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", a.file.display())))?;
    keep_valid(&mut set, &mut report, &owners)?;
    prune_generated(&mut set, &owners.generated);
    print_report(conn.output, source, &report)?;
    apply_set(conn, set, false, &a.write).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn result<'a>(report: &'a [Line], kind: &str, key: &str) -> &'a Outcome {
        &report.iter().find(|l| l.kind == kind && l.key == key).unwrap().outcome
    }

    /// What validation refuses goes with everything of its report line (a
    /// segment's written negations, the features using it), and segments
    /// written for what was left out go too.
    #[test]
    fn what_validation_refuses_leaves_with_its_line() {
        let doc = json!({
            "features": [
                {"name": "uses-bad", "enabled": true,
                 "strategies": [{"name": "default", "parameters": {}, "segments": [1]}]},
                {"name": "fine", "enabled": true,
                 "strategies": [{"name": "flexibleRollout", "parameters": {"rollout": "50"}}]},
                {"name": "custom", "enabled": true,
                 "strategies": [{"name": "flexibleRollout", "parameters": {"rollout": "50"}},
                                {"name": "mine", "parameters": {}}]}
            ],
            // An inverted pattern flagstream's engine refuses: its negation
            // segment fails validation.
            "segments": [{"id": 1, "constraints": [
                {"contextName": "email", "operator": "REGEX", "value": "(?=x)", "inverted": true}]}]
        });
        let (mut set, mut report, owners) = unleash::convert(&doc, false).unwrap();
        keep_valid(&mut set, &mut report, &owners).unwrap();
        prune_generated(&mut set, &owners.generated);
        assert!(
            matches!(result(&report, "segment", "unleash-segment-1"), Outcome::Skipped(w) if w.contains("regex"))
        );
        assert!(matches!(result(&report, "feature", "uses-bad"), Outcome::Skipped(_)));
        assert!(matches!(result(&report, "feature", "fine"), Outcome::Exact));
        assert!(matches!(result(&report, "feature", "custom"), Outcome::Skipped(w) if w.contains("mine")));
        let keys: Vec<&str> = set.segments.iter().map(|s| s.key.as_str()).collect();
        assert!(keys.contains(&"fine.strategy1"), "{keys:?}");
        assert!(
            !keys.iter().any(|k| k.starts_with("unleash-segment-1") || k.starts_with("custom.")),
            "{keys:?}"
        );
        assert_eq!(set.flags.iter().map(|f| f.key.as_str()).collect::<Vec<_>>(), ["fine"]);
        assert!(flagstream::validate::flag_set(&set, &flagstream::Limits::default()).is_ok());
    }
}
