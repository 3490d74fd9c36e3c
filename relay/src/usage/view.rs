//! `GetUsage`: an environment's usage as the relay holds it, one key, a
//! page of keys (at most a page size and [`MAX_PAGE_BYTES`] encoded, the
//! next page's token the last key given) or every key reported (the status
//! page). Built under the environment's own lock only; callers run it on
//! the blocking pool.

use flagstream::Snapshot;
use flagstream_proto::v1 as pb;
use prost::Message as _;
use serde_json::Value as Json;

use super::window::window;
use super::{DAY, EnvUsage, FIVE_MINUTES, FlagStats, HOUR, LONG, SHORT, Usage, differs, lock, majority};
use crate::store::now_ms;

/// Most bytes of flags in one page, as the other list calls (PROTOCOL.md
/// §5): well under the 8 MiB response limit.
pub(crate) const MAX_PAGE_BYTES: usize = 4 << 20;

/// Which keys a view holds.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Keys<'a> {
    /// This key (also when nothing was reported for it).
    One(&'a str),
    /// Every flag of the data and every key reported, in key order, after
    /// `after`, at most `size`.
    Page { after: &'a str, size: usize },
    /// Only the keys something was reported for.
    Reported,
}

impl Usage {
    /// The usage of environment `env` (current data `snap`) for `keys`.
    pub(crate) fn view(&self, env: &str, snap: &Snapshot, keys: Keys<'_>) -> pb::GetUsageResponse {
        let now = now_ms();
        let cell = self.env_cell(env);
        let guard = cell.as_deref().map(lock);
        let empty = EnvUsage::default();
        let e = guard.as_deref().unwrap_or(&empty);
        let mut next_page_token = String::new();
        let flags = match keys {
            Keys::One(k) => vec![entry(e, snap, k, now)],
            Keys::Reported => {
                let mut ks: Vec<&str> = e.flags.keys().map(String::as_str).collect();
                ks.sort_unstable();
                ks.into_iter().map(|k| entry(e, snap, k, now)).collect()
            }
            Keys::Page { after, size } => {
                // The page's keys: the flags of the data and the other keys
                // reported, after `after`; the first `size` selected in
                // linear time, then sorted (no sort of the whole set per
                // page).
                let mut ks: Vec<&str> = snap
                    .keys()
                    .chain(e.flags.keys().map(String::as_str).filter(|k| !snap.contains(k)))
                    .filter(|k| *k > after)
                    .collect();
                let size = size.max(1);
                let more = ks.len() > size;
                if more {
                    ks.select_nth_unstable(size - 1);
                    ks.truncate(size);
                }
                ks.sort_unstable();
                let (mut out, mut bytes) = (Vec::new(), 0usize);
                for k in &ks {
                    let v = entry(e, snap, k, now);
                    let len = v.encoded_len();
                    if !out.is_empty() && bytes + len > MAX_PAGE_BYTES {
                        break;
                    }
                    bytes += len;
                    out.push(v);
                }
                // `out` holds at least one entry here (the first always
                // fits), so the token is its last key, never empty.
                if more || out.len() < ks.len() {
                    next_page_token =
                        out.last().map(|l: &pb::FlagUsageView| l.key.clone()).unwrap_or_default();
                }
                out
            }
        };
        pb::GetUsageResponse {
            flags,
            collecting_since_unix_ms: self.started_ms,
            now_unix_ms: now,
            untracked_evaluations_day: e.untracked.sum(LONG, HOUR, now).fallbacks[0],
            dropped_keys: e.dropped,
            next_page_token,
        }
    }
}

/// One key's usage.
fn entry(e: &EnvUsage, snap: &Snapshot, k: &str, now: u64) -> pb::FlagUsageView {
    let none = FlagStats::default();
    let st = e.flags.get(k).unwrap_or(&none);
    let flag = snap.flag(k);
    let hour = st.short.sum(SHORT, FIVE_MINUTES, now);
    let day = st.long.sum(LONG, HOUR, now);
    let maj = majority(&day);
    let value = maj.and_then(|v| flag.as_ref().and_then(|f| f.variations.get(v as usize)));
    let defaults: Vec<pb::DefaultSeen> = st
        .listed_defaults(now)
        .into_iter()
        .map(|d| pb::DefaultSeen {
            json: d.json.clone(),
            last_seen_unix_ms: d.last_seen_ms,
            mismatch: value.is_some_and(|v| differs(&d.json, v)),
        })
        .collect();
    let (sdks, sdks_capped) = st.sdks(now);
    pb::FlagUsageView {
        key: k.to_owned(),
        exists: flag.is_some(),
        // No such flag: no values (`exists` says so).
        variation_values: (flag.as_ref())
            .map(|f| f.variations.iter().map(Json::to_string).collect())
            .unwrap_or_default(),
        hour: Some(window(&hour)),
        // A mismatch seen within the day counts even when the default is
        // not among the listed ones.
        default_mismatch: defaults.iter().any(|d| d.mismatch)
            || (st.mismatch_ms > 0 && st.mismatch_ms + DAY > now),
        other_defaults_day: day.other_defaults,
        day: Some(window(&day)),
        sdks,
        sdks_capped,
        last_evaluated_unix_ms: st.last_evaluated_ms,
        defaults,
        majority_variation: maj.map_or(-1, |v| v as i32),
        sole_variation: st.sole.map_or(-1, |v| v as i32),
        sole_since_unix_ms: st.sole_since_ms,
        flag_version: flag.as_ref().map_or(0, |f| f.version),
        flag_revision: flag.map_or(0, |f| f.revision),
    }
}
