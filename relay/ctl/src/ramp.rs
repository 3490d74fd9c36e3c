//! `flagctl flag ramp`: progressive rollouts (schedules) on a flag's
//! fallthrough or one of its rules — creating one, pausing it where it
//! stands, rolling it back — and the "current and next step" summary that
//! `flag get` prints. Each action is one write with the version it read.

use std::time::Duration;

use clap::Args;
use flagstream::Flag;
use flagstream::model::{Schedule, Serve, Step};

use crate::conn::Conn;
use crate::edit::{WriteArgs, get_flag, variation_index, write_flag, write_flag_finalized};
use crate::failure::{CmdResult, Failure, invalid};

/// `flag ramp` options.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("action").args(["steps", "pause", "rollback"]).required(true))]
pub struct RampArgs {
    /// Flag key.
    pub key: String,
    /// The steps: PERCENT@OFFSET, comma-separated, offsets from --start
    /// (e.g. `1%@0s,5%@1h,25%@1d,100%@3d`; a step without `@` starts at
    /// --start). Percentages must not decrease and offsets must increase.
    #[arg(long, value_delimiter = ',')]
    pub steps: Vec<String>,
    /// The variation ramped up (value or #INDEX) [default: true for bool flags].
    #[arg(long)]
    pub variation: Option<String>,
    /// What everyone else gets (value or #INDEX) [default: false for bool
    /// flags, else the variation served before the ramp].
    #[arg(long)]
    pub otherwise: Option<String>,
    /// When offset 0 is: RFC 3339 (`2026-12-01T10:00:00Z`) or `now`.
    #[arg(long, default_value = "now")]
    pub start: String,
    /// Attribute (or reference) to bucket by [default: key].
    #[arg(long, default_value = "")]
    pub bucket_by: String,
    /// Context kind to bucket [default: a single-kind context's own kind,
    /// a multi-kind context's `user`].
    #[arg(long, default_value = "")]
    pub context_kind: String,
    /// Ramp the rule with this id (or `#N`: the rule at index N) instead
    /// of the fallthrough.
    #[arg(long)]
    pub rule: Option<String>,
    /// Stop where it stands: drop the steps that have not started yet.
    #[arg(long)]
    pub pause: bool,
    /// Serve `otherwise` to everyone again, ending the ramp.
    #[arg(long)]
    pub rollback: bool,
    /// Write options.
    #[command(flatten)]
    pub write: WriteArgs,
}

/// Runs `flag ramp`.
pub(crate) async fn ramp(conn: &mut Conn, a: RampArgs) -> CmdResult {
    let before = get_flag(conn, &a.key).await?;
    let mut after = before.clone();
    let rule = rule_index(&before, a.rule.as_deref())?;
    let what = match rule {
        None => "fallthrough".to_owned(),
        Some(i) => rule_label(&before, i),
    };
    let serve = serve_of(&mut after, rule);
    if a.pause || a.rollback {
        let Some(sc) = serve.schedule.as_deref() else {
            return Err(invalid(format!("flag {:?}: the {what} serves no ramp", a.key)));
        };
        if a.rollback {
            *serve = Serve::variation(sc.otherwise);
            return write_flag(conn, Some(&before), after, &a.write).await;
        }
        // Which steps have started is decided when the write is sent (after
        // the confirmation), so a step that starts meanwhile is kept: a
        // pause never takes the variation away from anyone.
        *serve = paused(sc.clone(), now_ms());
        return write_flag_finalized(conn, Some(&before), after, &a.write, |f| {
            let s = serve_of(f, rule);
            if let Some(sc) = before_pause(&before, rule) {
                *s = paused(sc, now_ms());
            }
        })
        .await;
    }
    let start = start_ms(&a.start, now_ms())?;
    let bool_index = |want: bool| {
        before.variations.iter().position(|v| *v == serde_json::Value::Bool(want)).map(|i| i as u32)
    };
    let variation = match &a.variation {
        Some(v) => variation_index(&before, v)?,
        None => bool_index(true).ok_or_else(|| invalid("--variation is required for a non-bool flag"))?,
    };
    let otherwise = match &a.otherwise {
        Some(v) => variation_index(&before, v)?,
        // The other bool; else what the serve gives now (a fixed
        // variation, or the `otherwise` of the ramp it replaces).
        None => [
            bool_index(false),
            bool_index(true),
            serve.variation,
            serve.schedule.as_ref().map(|s| s.otherwise),
        ]
        .into_iter()
        .flatten()
        .find(|&v| v != variation)
        .ok_or_else(|| invalid("--otherwise is required: nothing else to serve outside the ramp"))?,
    };
    if otherwise == variation {
        return Err(invalid("--otherwise: the same variation as --variation; a ramp needs two"));
    }
    let steps = parse_steps(&a.steps, start)?;
    *serve = Serve::schedule(Schedule {
        variation,
        otherwise,
        bucket_by: a.bucket_by.clone(),
        context_kind: a.context_kind.clone(),
        seed: None,
        steps,
    });
    write_flag(conn, Some(&before), after, &a.write).await
}

/// A ramp held where it stands at `now`: the steps not started are
/// dropped; one not started at all serves `otherwise`.
fn paused(mut sc: Schedule, now: i64) -> Serve {
    sc.steps.retain(|s| s.start_unix_ms <= now);
    if sc.steps.is_empty() { Serve::variation(sc.otherwise) } else { Serve::schedule(sc) }
}

/// The schedule a pause starts from.
fn before_pause(f: &Flag, rule: Option<usize>) -> Option<Schedule> {
    let serve = match rule {
        None => &f.fallthrough,
        Some(i) => &f.rules[i].serve,
    };
    serve.schedule.as_deref().cloned()
}

/// `--rule`: a rule id, or `#N` for the rule at index N (rules without an
/// id); `None`: the fallthrough.
fn rule_index(f: &Flag, rule: Option<&str>) -> Result<Option<usize>, Failure> {
    let Some(sel) = rule else { return Ok(None) };
    if let Some(n) = sel.strip_prefix('#') {
        let i: usize = n.parse().map_err(|_| invalid(format!("--rule {sel:?}: not a rule index")))?;
        return if i < f.rules.len() {
            Ok(Some(i))
        } else {
            Err(invalid(format!("--rule {sel}: flag {:?} has {} rules", f.key, f.rules.len())))
        };
    }
    if sel.is_empty() {
        return Err(invalid("--rule: empty; give a rule id or #INDEX"));
    }
    f.rules.iter().position(|r| r.id == sel).map(Some).ok_or_else(|| {
        invalid(format!("flag {:?} has no rule with id {sel:?} (a rule without an id: #INDEX)", f.key))
    })
}

/// How a rule is named in messages and in `flag get`: its id, or `#N`.
fn rule_label(f: &Flag, i: usize) -> String {
    match f.rules[i].id.as_str() {
        "" => format!("rule #{i}"),
        id => format!("rule {id:?}"),
    }
}

/// The serve a ramp changes (`rule` from [`rule_index`]).
fn serve_of(f: &mut Flag, rule: Option<usize>) -> &mut Serve {
    match rule {
        None => &mut f.fallthrough,
        Some(i) => &mut f.rules[i].serve,
    }
}

fn now_ms() -> i64 {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    // A clock before 1970 counts as 1970.
    since.map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn start_ms(s: &str, now: i64) -> Result<i64, Failure> {
    if s == "now" {
        return Ok(now);
    }
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| invalid(format!("--start {s:?}: not an RFC 3339 time or `now`: {e}")))
}

/// `PERCENT[@OFFSET]` items into steps from `start`.
fn parse_steps(items: &[String], start: i64) -> Result<Vec<Step>, Failure> {
    let mut steps: Vec<Step> = Vec::with_capacity(items.len());
    for item in items {
        let (pct, offset) = item.split_once('@').unwrap_or((item, "0s"));
        let pct = pct.trim().trim_end_matches('%');
        let pct: f64 =
            pct.parse().map_err(|_| invalid(format!("--steps {item:?}: {pct:?} is not a percentage")))?;
        if !(0.0..=100.0).contains(&pct) {
            return Err(invalid(format!("--steps {item:?}: percentage must be 0..=100")));
        }
        let offset = humantime::parse_duration(offset.trim())
            .map_err(|e| invalid(format!("--steps {item:?}: {offset:?} is not a duration: {e}")))?;
        let step = Step {
            start_unix_ms: start.saturating_add(i64::try_from(offset.as_millis()).unwrap_or(i64::MAX)),
            weight: (pct * 1000.0).round() as u32,
        };
        if let Some(prev) = steps.last() {
            if step.start_unix_ms <= prev.start_unix_ms {
                return Err(invalid(format!("--steps {item:?}: starts no later than the step before it")));
            }
            if step.weight < prev.weight {
                return Err(invalid(format!("--steps {item:?}: a ramp may not go down (buckets only grow)")));
            }
        }
        steps.push(step);
    }
    if steps.is_empty() {
        return Err(invalid("--steps: at least one step"));
    }
    Ok(steps)
}

/// One line per ramp in `f`: where it stands at `now_ms` and what comes
/// next (what `flag get` prints).
pub(crate) fn describe(f: &Flag, now_ms: i64) -> Vec<String> {
    let mut out = Vec::new();
    let serves = std::iter::once(("fallthrough".to_owned(), &f.fallthrough)).chain(
        f.rules.iter().enumerate().map(|(i, r)| {
            (if r.id.is_empty() { format!("rule {i}") } else { format!("rule {:?}", r.id) }, &r.serve)
        }),
    );
    for (what, serve) in serves {
        let Some(sc) = serve.schedule.as_deref() else { continue };
        let value = |i: u32| f.variations.get(i as usize).map_or_else(|| format!("#{i}"), |v| v.to_string());
        let current = sc.steps.iter().rposition(|s| s.start_unix_ms <= now_ms);
        let mut line = match current {
            None => format!(
                "{what}: ramp of {} not started: everyone gets {}",
                value(sc.variation),
                value(sc.otherwise)
            ),
            Some(i) => format!(
                "{what}: ramp of {} at step {} of {}: {}% since {}",
                value(sc.variation),
                i + 1,
                sc.steps.len(),
                f64::from(sc.steps[i].weight) / 1000.0,
                time(sc.steps[i].start_unix_ms)
            ),
        };
        match sc.steps.get(current.map_or(0, |i| i + 1)) {
            Some(next) => line.push_str(&format!(
                "; next: {}% at {} (in {})",
                f64::from(next.weight) / 1000.0,
                time(next.start_unix_ms),
                humantime::format_duration(Duration::from_secs(
                    ((next.start_unix_ms - now_ms) / 1000).max(0) as u64
                ))
            )),
            None => line.push_str("; no further step"),
        }
        out.push(line);
    }
    out
}

fn time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map_or_else(|| ms.to_string(), |t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
}

/// What `flag get` adds after the flag in the default output: YAML
/// comments, so the output stays a valid flag document.
pub(crate) fn print_summary(f: &Flag) {
    for line in describe(f, now_ms()) {
        println!("# {line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_parse_from_offsets_and_refuse_going_down() {
        let items: Vec<String> = ["1%@0s", "5%@1h", "25", "100%@3d"].iter().map(|s| s.to_string()).collect();
        assert!(parse_steps(&items, 0).unwrap_err().message.contains("starts no later"));
        let items: Vec<String> = ["1%", "5%@1h", "100%@3d"].iter().map(|s| s.to_string()).collect();
        let s = parse_steps(&items, 1_000).unwrap();
        assert_eq!(
            s.iter().map(|s| (s.start_unix_ms, s.weight)).collect::<Vec<_>>(),
            [(1_000, 1_000), (1_000 + 3_600_000, 5_000), (1_000 + 3 * 86_400_000, 100_000)]
        );
        let down: Vec<String> = ["50%", "10%@1h"].iter().map(|s| s.to_string()).collect();
        assert!(parse_steps(&down, 0).unwrap_err().message.contains("may not go down"));
        let bad: Vec<String> = vec!["150%".into()];
        assert!(parse_steps(&bad, 0).unwrap_err().message.contains("0..=100"));
    }

    #[test]
    fn the_summary_names_the_current_and_next_step() {
        let mut f: Flag = serde_yaml_ng::from_str(
            "key: f\ntype: bool\nvariations: [true, false]\non: true\noff_variation: 1\nfallthrough: {variation: 0}\n",
        )
        .unwrap();
        f.fallthrough = Serve::schedule(Schedule {
            variation: 0,
            otherwise: 1,
            bucket_by: String::new(),
            context_kind: String::new(),
            seed: None,
            steps: vec![
                Step { start_unix_ms: 0, weight: 5_000 },
                Step { start_unix_ms: 3_600_000, weight: 25_000 },
            ],
        });
        assert_eq!(
            describe(&f, -1),
            [
                "fallthrough: ramp of true not started: everyone gets false; next: 5% at 1970-01-01T00:00:00Z (in 0s)"
            ]
        );
        assert_eq!(
            describe(&f, 1_000),
            [
                "fallthrough: ramp of true at step 1 of 2: 5% since 1970-01-01T00:00:00Z; next: 25% at 1970-01-01T01:00:00Z (in 59m 59s)"
            ]
        );
        assert!(describe(&f, 3_600_000)[0].ends_with("25% since 1970-01-01T01:00:00Z; no further step"));
    }
}
