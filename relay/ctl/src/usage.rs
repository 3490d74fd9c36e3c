//! `flag usage` and `flag stale`: what the SDKs evaluated, as the relay
//! holds it (`GetUsage`; PROTOCOL.md "Usage summaries"), with the
//! default-mismatch warning, and the flags that look ready to retire.

use flagstream_proto::v1 as pb;
use serde::Serialize;
use serde_json::{Value as Json, json};

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit};
use crate::output::{Output, print_data};

const DAY_MS: u64 = 86_400_000;
/// Audit pages read for flag creation and change times (1,000 entries
/// each); older history is not looked at.
const AUDIT_PAGES: usize = 20;

fn fallbacks(w: &pb::UsageWindow) -> Json {
    json!({
        "missing": w.fallback_missing,
        "wrong_type": w.fallback_wrong_type,
        "malformed": w.fallback_malformed,
        "not_ready": w.fallback_not_ready,
    })
}

fn fallback_total(w: &pb::UsageWindow) -> u64 {
    w.fallback_missing + w.fallback_wrong_type + w.fallback_malformed + w.fallback_not_ready
}

/// `label:count` per variation, labelled by its value where known.
fn per_variation(f: &pb::FlagUsageView, w: &pb::UsageWindow) -> Vec<Json> {
    w.variations
        .iter()
        .enumerate()
        .map(|(i, n)| json!({"variation": i, "value": value_of(f, i), "evaluations": n}))
        .collect()
}

fn value_of(f: &pb::FlagUsageView, i: usize) -> Json {
    // A variation the flag no longer has (it changed since): null.
    f.variation_values.get(i).and_then(|v| serde_json::from_str(v).ok()).unwrap_or(Json::Null)
}

/// The warnings for one flag: each default callers pass that differs from
/// the value the flag serves most.
fn warnings(f: &pb::FlagUsageView) -> Vec<String> {
    let Ok(v) = usize::try_from(f.majority_variation) else { return Vec::new() };
    let served = f.variation_values.get(v).map_or("?", String::as_str);
    f.defaults
        .iter()
        .filter(|d| d.mismatch)
        .map(|d| {
            format!(
                "flag {:?}: callers pass default {} but the flag serves {served} (variation {v}) to most contexts; \
                 whenever they fall back (flag deleted or renamed, SDK not ready, wrong type) they get {} instead",
                f.key, d.json, d.json
            )
        })
        .collect()
}

fn age(now: u64, at: u64) -> String {
    if at == 0 {
        return "never".into();
    }
    let s = now.saturating_sub(at) / 1000;
    match s {
        0..120 => format!("{s}s ago"),
        120..7200 => format!("{}m ago", s / 60),
        7200..172_800 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86_400),
    }
}

/// The environment's usage for `key`, or (empty `key`) for every flag and
/// reported key, page by page (a page is at most 1,000 flags and 4 MiB).
async fn get_usage(conn: &mut Conn, key: &str) -> Result<pb::GetUsageResponse, Failure> {
    let env = conn.env.clone();
    let key = key.to_owned();
    let admin = conn.admin.clone();
    let mut all: Option<pb::GetUsageResponse> = None;
    let mut token = String::new();
    loop {
        let page = crate::conn::with_retry(|| {
            let mut admin = admin.clone();
            let req = pb::GetUsageRequest {
                environment: env.clone(),
                key: key.clone(),
                page_size: 0,
                page_token: token.clone(),
            };
            async move { admin.get_usage(req).await.map(tonic::Response::into_inner) }
        })
        .await?;
        token = page.next_page_token.clone();
        match &mut all {
            None => all = Some(page),
            Some(all) => {
                all.flags.extend(page.flags);
                all.now_unix_ms = page.now_unix_ms;
                all.dropped_keys = page.dropped_keys;
                all.untracked_evaluations_day = page.untracked_evaluations_day;
            }
        }
        if token.is_empty() {
            break;
        }
    }
    // The loop ran at least once: `all` is a page (the default is never used).
    let mut all = all.unwrap_or_default();
    all.next_page_token.clear();
    Ok(all)
}

/// `flagctl flag usage [KEY]`.
pub(crate) async fn usage(conn: &mut Conn, key: Option<String>) -> CmdResult {
    let r = get_usage(conn, key.as_deref().unwrap_or("")).await?;
    let now = r.now_unix_ms;
    let empty = pb::UsageWindow::default();
    if conn.output != Output::Table {
        let flags: Vec<Json> = r
            .flags
            .iter()
            .map(|f| {
                let (hour, day) = (f.hour.as_ref().unwrap_or(&empty), f.day.as_ref().unwrap_or(&empty));
                json!({
                    "key": f.key,
                    "exists": f.exists,
                    "variations": f.variation_values.iter().map(|v| serde_json::from_str(v).unwrap_or(Json::Null)).collect::<Vec<Json>>(),
                    "hour": {"evaluations": per_variation(f, hour), "fallbacks": fallbacks(hour)},
                    "day": {"evaluations": per_variation(f, day), "fallbacks": fallbacks(day)},
                    "sdks": f.sdks,
                    "sdks_capped": f.sdks_capped,
                    "last_evaluated_unix_ms": f.last_evaluated_unix_ms,
                    "defaults": f.defaults.iter().map(|d| json!({"value": serde_json::from_str::<Json>(&d.json).unwrap_or(Json::String(d.json.clone())), "last_seen_unix_ms": d.last_seen_unix_ms, "mismatch": d.mismatch})).collect::<Vec<Json>>(),
                    "other_defaults_day": f.other_defaults_day,
                    "most_served_variation": usize::try_from(f.majority_variation).ok(),
                    "default_mismatch": f.default_mismatch,
                    "warnings": warnings(f),
                })
            })
            .collect();
        let out = json!({
            "environment": conn.env,
            "collecting_since_unix_ms": r.collecting_since_unix_ms,
            "now_unix_ms": now,
            "untracked_evaluations_day": r.untracked_evaluations_day,
            "dropped_keys": r.dropped_keys,
            "flags": flags,
        });
        return print_data(conn.output, &out);
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_header(["KEY", "LAST HOUR", "LAST DAY", "FALLBACKS (DAY)", "SDKS", "LAST EVALUATED", "DEFAULTS"]);
    let counts = |f: &pb::FlagUsageView, w: Option<&pb::UsageWindow>| {
        let w = w.unwrap_or(&empty);
        let parts: Vec<String> = w
            .variations
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| {
                format!("{}={n}", f.variation_values.get(i).cloned().unwrap_or_else(|| format!("#{i}")))
            })
            .collect();
        if parts.is_empty() { "-".to_owned() } else { parts.join(" ") }
    };
    let mut warned = Vec::new();
    for f in &r.flags {
        let day = f.day.as_ref().unwrap_or(&empty);
        let fb = if fallback_total(day) == 0 {
            "-".to_owned()
        } else {
            let named = [
                ("missing", day.fallback_missing),
                ("wrong_type", day.fallback_wrong_type),
                ("malformed", day.fallback_malformed),
                ("not_ready", day.fallback_not_ready),
            ];
            named
                .iter()
                .filter(|(_, n)| *n > 0)
                .map(|(c, n)| format!("{c}={n}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut defaults: Vec<String> = f
            .defaults
            .iter()
            .map(|d| if d.mismatch { format!("{} (!)", d.json) } else { d.json.clone() })
            .collect();
        if f.other_defaults_day > 0 {
            defaults.push(format!("+{} other", f.other_defaults_day));
        }
        t.add_row([
            if f.exists { f.key.clone() } else { format!("{} (no such flag)", f.key) },
            counts(f, f.hour.as_ref()),
            counts(f, f.day.as_ref()),
            fb,
            format!("{}{}", f.sdks, if f.sdks_capped { "+" } else { "" }),
            age(now, f.last_evaluated_unix_ms),
            if defaults.is_empty() { "-".into() } else { defaults.join(" ") },
        ]);
        warned.extend(warnings(f));
    }
    println!("{t}");
    println!(
        "usage collected by this relay since {} ({})",
        r.collecting_since_unix_ms,
        age(now, r.collecting_since_unix_ms)
    );
    for w in &warned {
        println!("WARNING: {w}");
    }
    Ok(())
}

/// When each flag was created and last changed, from the audit log (the
/// newest `AUDIT_PAGES` pages); empty on a relay without one (a replica).
async fn change_times(conn: &mut Conn) -> Result<std::collections::HashMap<String, (u64, u64)>, Failure> {
    let mut times: std::collections::HashMap<String, (u64, u64)> = std::collections::HashMap::new();
    let mut token = String::new();
    for _ in 0..AUDIT_PAGES {
        let r = conn
            .admin
            .list_audit(pb::ListAuditRequest {
                environment: conn.env.clone(),
                key: String::new(),
                item_kind: pb::ItemKind::Flag as i32,
                limit: 1000,
                page_token: token,
            })
            .await;
        let r = match r {
            Ok(r) => r.into_inner(),
            // A replica keeps no audit log: no times, the rest still works.
            Err(s) if s.code() == tonic::Code::Unimplemented => return Ok(times),
            Err(s) => return Err(s.into()),
        };
        for e in &r.entries {
            if e.key.is_empty() || e.item_kind != pb::ItemKind::Flag as i32 {
                continue;
            }
            // Newest first: the first entry is the last change; a create
            // further back the creation.
            let t = times.entry(e.key.clone()).or_insert((0, e.time_unix_ms));
            if e.action == pb::AuditAction::Create as i32 {
                t.0 = e.time_unix_ms;
            }
        }
        if r.next_page_token.is_empty() {
            break;
        }
        token = r.next_page_token;
    }
    Ok(times)
}

#[derive(Serialize)]
struct Stale {
    key: String,
    /// `not_evaluated` or `one_variation`.
    kind: &'static str,
    /// Since when (Unix ms) the condition holds, as far as is known.
    since_unix_ms: u64,
    days: f64,
    evidence: String,
}

/// What `flag stale` cannot see: printed with its table and in `-o json`
/// (`caveat`).
pub(crate) const STALE_CAVEAT: &str = "\"not evaluated\" means no usage summary reported it to this relay: clients that send no usage (usage_reports off, SDKs without usage reporting, clients of other relays on the same database) are not seen";

/// `flagctl flag stale [--days N]`.
pub(crate) async fn stale(conn: &mut Conn, days: f64) -> CmdResult {
    if days.is_nan() || days < 0.0 {
        return Err(Failure::new(exit::USAGE, format!("--days {days}: must be 0 or more")));
    }
    let r = get_usage(conn, "").await?;
    let times = change_times(conn).await?;
    let now = r.now_unix_ms;
    let limit = (days * DAY_MS as f64) as u64;
    let since_collecting = age(now, r.collecting_since_unix_ms);
    let mut out = Vec::new();
    for f in r.flags.iter().filter(|f| f.exists) {
        // Not in the audit pages read (or a replica): times unknown, 0.
        let (created, changed) = times.get(&f.key).copied().unwrap_or((0, 0));
        let idle_since = match f.last_evaluated_unix_ms {
            0 => created.max(r.collecting_since_unix_ms),
            t => t,
        };
        if now.saturating_sub(idle_since) >= limit {
            let evidence = match (f.last_evaluated_unix_ms, created) {
                (0, c) if c >= r.collecting_since_unix_ms => {
                    format!(
                        "never evaluated since it was created ({}; usage collected since {since_collecting})",
                        age(now, c)
                    )
                }
                (0, _) => {
                    format!("never evaluated since this relay began collecting usage ({since_collecting})")
                }
                (t, _) => format!("last evaluated {}", age(now, t)),
            };
            out.push(Stale {
                key: f.key.clone(),
                kind: "not_evaluated",
                since_unix_ms: idle_since,
                days: now.saturating_sub(idle_since) as f64 / DAY_MS as f64,
                evidence,
            });
        }
        if let Ok(v) = usize::try_from(f.sole_variation) {
            // The condition holds since the later of the first summary with
            // only this variation and the flag's last change.
            let since = f.sole_since_unix_ms.max(changed);
            if now.saturating_sub(since) >= limit && f.last_evaluated_unix_ms > 0 {
                let value = f.variation_values.get(v).map_or("?", String::as_str);
                out.push(Stale {
                    key: f.key.clone(),
                    kind: "one_variation",
                    since_unix_ms: since,
                    days: now.saturating_sub(since) as f64 / DAY_MS as f64,
                    evidence: format!(
                        "served only variation {v} ({value}) to every evaluation since {} (flag last changed {}, revision {}); candidate to retire: replace it with {value} in code",
                        age(now, f.sole_since_unix_ms),
                        age(now, changed),
                        f.flag_revision
                    ),
                });
            }
        }
    }
    if conn.output != Output::Table {
        return print_data(
            conn.output,
            &json!({"environment": conn.env, "days": days, "collecting_since_unix_ms": r.collecting_since_unix_ms, "now_unix_ms": now, "caveat": STALE_CAVEAT, "flags": out}),
        );
    }
    if out.is_empty() {
        println!(
            "no flag unused or serving one variation for {days} days (usage collected since {since_collecting})"
        );
        println!("note: {STALE_CAVEAT}");
        return Ok(());
    }
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_header(["KEY", "KIND", "DAYS", "EVIDENCE"]);
    for s in &out {
        t.add_row([s.key.clone(), s.kind.to_owned(), format!("{:.1}", s.days), s.evidence.clone()]);
    }
    println!("{t}");
    println!("note: {STALE_CAVEAT}");
    Ok(())
}
