//! Flag usage reported by SDKs (PROTOCOL.md "Usage summaries"): checked
//! against the summary bounds, added to per-environment, per-flag windows
//! (the last hour in 12 five-minute buckets, the last day in 24 hourly
//! ones), SDK instances and defaults seen; read by `GetUsage` (admin) and,
//! on a replica, forwarded upstream as the replica's own summaries; on a
//! shared database, passed to the other relays through it (`feed/usage.rs`)
//! and taken from them.
//!
//! Bounded: per environment its flags (always admitted) plus at most
//! [`MAX_ABSENT_KEYS`] keys that are no flag, at most [`MAX_KEYS`] such
//! keys over all environments (further keys dropped and counted), per flag
//! at most [`MAX_INSTANCES`] instances and [`MAX_DEFAULTS`] defaults told
//! apart, per bucket at most as many variation counts as the flag has
//! variations (none for a key that is no flag; ARCHITECTURE.md "Usage
//! reporting" gives the memory formula). In memory only: a restart starts
//! over (`collecting_since_unix_ms`), except that a relay of a shared
//! database takes the last hour the other relays passed on again.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;

use flagstream::Snapshot;
use flagstream::usage::{MAX_DEFAULT_BYTES, MAX_FLAGS_PER_SUMMARY, MAX_KEY_BYTES, MAX_VARIATIONS};
use flagstream_proto::v1 as pb;
use prost::Message as _;
use serde_json::Value as Json;

use crate::metrics::Metrics;
use crate::store::now_ms;

/// Keys that are no flag held over all environments (a safety bound on top
/// of the per-environment [`MAX_ABSENT_KEYS`]; real flags are always
/// admitted, bounded by the environments' data); summaries naming further
/// keys have those entries dropped (counted in
/// `GetUsageResponse.dropped_keys`).
pub(crate) const MAX_KEYS: usize = 100_000;
/// Most encoded bytes of one summary a replica forwards (as the Rust SDK:
/// well under the upstream's 1 MiB request limit, PROTOCOL.md 4.1).
pub(crate) const MAX_FORWARD_BYTES: usize = 512 << 10;
/// Room for a summary's own fields (two times and `untracked_evaluations`,
/// each at most 11 bytes encoded).
const SUMMARY_HEADER_BYTES: usize = 64;
/// How often at most an environment's keys that are no flag are recounted
/// against its current data (and idle ones dropped) when its share is full.
const RECOUNT_MS: u64 = 60_000;
/// Keys per environment that are no flag of it (SDKs asking for missing
/// flags): a key holder cannot fill the table with made-up keys beyond
/// this, nor touch another environment's share.
pub(crate) const MAX_ABSENT_KEYS: usize = 1_024;
/// Summaries one stream may send per minute (a sender with 100,000 flags
/// needs 100); further ones are refused (`field` `usage.rate`).
pub(crate) const MAX_SUMMARIES_PER_MINUTE: u32 = 128;
/// SDK instances told apart per flag (`sdks_capped` beyond).
pub(crate) const MAX_INSTANCES: usize = 64;
/// Defaults listed per flag (further ones counted as "other").
pub(crate) const MAX_DEFAULTS: usize = 4;
/// Most defaults one summary entry may list.
const MAX_SUMMARY_DEFAULTS: usize = flagstream::usage::MAX_DEFAULTS;

const FIVE_MINUTES: u64 = 300_000;
const HOUR: u64 = 3_600_000;
const DAY: u64 = 24 * HOUR;
/// Buckets: 12 × 5 minutes, 24 × 1 hour.
const SHORT: usize = 12;
const LONG: usize = 24;

/// Fallback causes, in `UsageWindow` order.
/// Flags per environment with their own `usage_flag_fallbacks` series:
/// the metric's cardinality bound (OPERATIONS.md §7.9).
pub(crate) const MAX_FLAG_SERIES: usize = 100;

/// The `flag` label of fallbacks of flags past [`MAX_FLAG_SERIES`].
pub(crate) const OTHER_FLAGS: &str = "_other";

/// The `flag` label of fallbacks of keys that are no flag of the
/// environment (typos, deleted flags, hostile keys).
pub(crate) const UNKNOWN_FLAGS: &str = "_unknown";

const CAUSES: [&str; 4] = ["missing", "wrong_type", "malformed", "not_ready"];

/// Counts in one bucket of time.
#[derive(Debug, Default, Clone)]
struct Bucket {
    period: u64,
    variations: Vec<u64>,
    fallbacks: [u64; 4],
    other_defaults: u64,
}

impl Bucket {
    /// Adds entry `e` (its variation counts already clamped to the flag's
    /// variations, see [`clamp`]).
    fn add(&mut self, e: &pb::FlagUsage) {
        if self.variations.len() < e.variations.len() {
            self.variations.resize(e.variations.len(), 0);
        }
        for (a, b) in self.variations.iter_mut().zip(&e.variations) {
            *a = a.saturating_add(*b);
        }
        for (a, b) in self.fallbacks.iter_mut().zip(fallbacks(e)) {
            *a = a.saturating_add(b);
        }
        self.other_defaults = self.other_defaults.saturating_add(e.other_defaults);
    }
}

fn fallbacks(e: &pb::FlagUsage) -> [u64; 4] {
    [e.fallback_missing, e.fallback_wrong_type, e.fallback_malformed, e.fallback_not_ready]
}

/// Drops the variation counts of `e` beyond the `n` variations the flag
/// has in the receiver's data (all of them for a key that is no flag):
/// a bucket never grows past the real flag, whatever a sender claims.
fn clamp(e: &mut pb::FlagUsage, n: usize) {
    e.variations.truncate(n);
    while e.variations.last() == Some(&0) {
        e.variations.pop();
    }
}

/// Evaluations of entry `e` that passed one of `unlisted`, defaults it
/// lists that the receiver cannot list itself (its own bound of
/// [`MAX_DEFAULTS`]): all of the entry's evaluations not already in
/// `other_defaults` when none of its defaults is listed (exact), else at
/// least one per unlisted default (a lower bound: a summary does not say
/// how many evaluations passed which default).
fn unlisted_evaluations(e: &pb::FlagUsage, unlisted: usize) -> u64 {
    if unlisted == 0 {
        return 0;
    }
    if unlisted == e.defaults.len() {
        let all = e.variations.iter().chain(&fallbacks(e)).fold(0u64, |a, n| a.saturating_add(*n));
        return all.saturating_sub(e.other_defaults).max(unlisted as u64);
    }
    unlisted as u64
}

/// A ring of `N` buckets of `width` ms.
#[derive(Debug, Default)]
struct Ring {
    buckets: Vec<Bucket>,
}

impl Ring {
    fn bucket(&mut self, n: usize, width: u64, now: u64) -> &mut Bucket {
        if self.buckets.is_empty() {
            self.buckets.resize(n, Bucket::default());
        }
        let period = now / width;
        let b = &mut self.buckets[(period % n as u64) as usize];
        if b.period != period {
            *b = Bucket { period, ..Bucket::default() };
        }
        b
    }

    /// The sum over the buckets within the last `n` periods.
    fn sum(&self, n: usize, width: u64, now: u64) -> Bucket {
        let current = now / width;
        let mut out = Bucket::default();
        for b in self.buckets.iter().filter(|b| b.period + n as u64 > current && b.period <= current) {
            if out.variations.len() < b.variations.len() {
                out.variations.resize(b.variations.len(), 0);
            }
            for (a, x) in out.variations.iter_mut().zip(&b.variations) {
                *a = a.saturating_add(*x);
            }
            for (a, x) in out.fallbacks.iter_mut().zip(b.fallbacks) {
                *a = a.saturating_add(x);
            }
            out.other_defaults = out.other_defaults.saturating_add(b.other_defaults);
        }
        out
    }
}

/// One flag's usage.
#[derive(Debug, Default)]
struct FlagStats {
    short: Ring,
    long: Ring,
    /// (JSON text, last seen).
    defaults: Vec<(String, u64)>,
    /// (instance hash, instances it stands for, last seen, whether it is
    /// another relay of a shared database).
    instances: Vec<(u64, u32, u64, bool)>,
    /// When an instance last found the table full.
    capped_ms: u64,
    last_evaluated_ms: u64,
    /// When a summary last named the key (idle keys that are no flag are
    /// dropped after a day when the environment's share is full).
    last_seen_ms: u64,
    sole: Option<u32>,
    sole_since_ms: u64,
}

/// What a replica forwards upstream: the sum of its SDKs' summaries since
/// the last forward.
#[derive(Debug, Default)]
struct Outbox {
    flags: HashMap<String, Bucket>,
    defaults: HashMap<String, Vec<String>>,
    untracked: u64,
    since_ms: u64,
}

#[derive(Debug, Default)]
struct EnvUsage {
    flags: HashMap<String, FlagStats>,
    /// Keys in `flags` that were no flag of the environment when added
    /// (recounted against the current data when the share is full).
    absent: usize,
    /// When `absent` was last recounted.
    recounted_ms: u64,
    untracked: Ring,
    outbox: Outbox,
}

#[derive(Debug, Default)]
struct Inner {
    envs: HashMap<String, EnvUsage>,
    /// Keys held, all environments.
    keys: usize,
    /// Of `keys`, those that are no flag (the sum of `EnvUsage::absent`).
    absent: usize,
    dropped: u64,
}

impl EnvUsage {
    /// Recounts the keys that are no flag of `snap`, first dropping those
    /// no summary named for a day (their windows are empty); adjusts the
    /// totals `keys` and `absent`.
    fn recount(&mut self, snap: &Snapshot, now: u64, keys: &mut usize, absent: &mut usize) {
        self.recounted_ms = now;
        let before = self.flags.len();
        self.flags.retain(|k, st| snap.flag(k).is_some() || st.last_seen_ms + DAY > now);
        *keys -= before - self.flags.len();
        self.outbox.flags.retain(|k, _| self.flags.contains_key(k));
        self.outbox.defaults.retain(|k, _| self.flags.contains_key(k));
        let n = self.flags.keys().filter(|k| snap.flag(k).is_none()).count();
        *absent = *absent - self.absent + n;
        self.absent = n;
    }
}

/// The relay's usage table.
#[derive(Debug)]
pub(crate) struct Usage {
    inner: Mutex<Inner>,
    /// Per environment, the flags that have their own
    /// `usage_flag_fallbacks` series (at most [`MAX_FLAG_SERIES`]).
    flag_series: Mutex<HashMap<String, std::collections::HashSet<String>>>,
    metrics: Metrics,
    /// A replica (or a relay of a shared database): keeps an outbox per
    /// environment for its upstream (or the other relays).
    forward: bool,
    started_ms: u64,
}

/// Who sent a summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sender {
    /// An SDK's stream: one instance.
    Sdk,
    /// A replica relay's stream: its `instances` are taken.
    Replica,
    /// A relay of a shared database: as a replica, never passed on.
    Peer(PeerRow),
}

/// What is known of a usage row taken from a shared database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct PeerRow {
    /// Written by an earlier process of this relay (same node name).
    pub own: bool,
    /// Passed on before this process started (taken at its start).
    pub backlog: bool,
}

/// A summary over one of its bounds: the field and the message.
#[derive(Debug)]
pub(crate) struct OverBound {
    pub field: &'static str,
    pub message: String,
}

/// Checks a summary against PROTOCOL.md's bounds before anything of it is
/// used.
pub(crate) fn check(s: &pb::UsageSummary) -> Result<(), OverBound> {
    if s.flags.len() > MAX_FLAGS_PER_SUMMARY {
        return Err(OverBound {
            field: "usage.flags",
            message: format!("{} flags, the limit is {MAX_FLAGS_PER_SUMMARY}", s.flags.len()),
        });
    }
    for f in &s.flags {
        if f.key.len() > MAX_KEY_BYTES {
            return Err(OverBound {
                field: "usage.flags.key",
                message: format!("a key of {} bytes, the limit is {MAX_KEY_BYTES}", f.key.len()),
            });
        }
        if f.variations.len() > MAX_VARIATIONS {
            return Err(OverBound {
                field: "usage.flags.variations",
                message: format!(
                    "flag {:?}: {} variation counts, the limit is {MAX_VARIATIONS}",
                    f.key,
                    f.variations.len()
                ),
            });
        }
        if f.defaults.len() > MAX_SUMMARY_DEFAULTS {
            return Err(OverBound {
                field: "usage.flags.defaults",
                message: format!(
                    "flag {:?}: {} defaults, the limit is {MAX_SUMMARY_DEFAULTS}",
                    f.key,
                    f.defaults.len()
                ),
            });
        }
        if let Some(d) = f.defaults.iter().find(|d| d.len() > MAX_DEFAULT_BYTES) {
            return Err(OverBound {
                field: "usage.flags.defaults",
                message: format!(
                    "flag {:?}: a default of {} bytes, the limit is {MAX_DEFAULT_BYTES}",
                    f.key,
                    d.len()
                ),
            });
        }
    }
    Ok(())
}

fn instance_hash(id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// Whether a default (JSON text) differs from a served value.
fn differs(default: &str, value: &Json) -> bool {
    match serde_json::from_str::<Json>(default) {
        Ok(d) => match (d.as_f64(), value.as_f64()) {
            (Some(a), Some(b)) => a != b,
            _ => &d != value,
        },
        // Not JSON: not the value.
        Err(_) => true,
    }
}

fn majority(b: &Bucket) -> Option<u32> {
    b.variations.iter().enumerate().filter(|(_, n)| **n > 0).max_by_key(|(_, n)| **n).map(|(i, _)| i as u32)
}

fn window(b: &Bucket) -> pb::UsageWindow {
    pb::UsageWindow {
        variations: b.variations.clone(),
        fallback_missing: b.fallbacks[0],
        fallback_wrong_type: b.fallbacks[1],
        fallback_malformed: b.fallbacks[2],
        fallback_not_ready: b.fallbacks[3],
    }
}

impl FlagStats {
    fn sdks(&self, now: u64) -> (u32, bool) {
        let n =
            self.instances.iter().filter(|i| i.2 + HOUR > now).map(|i| i.1).fold(0u32, u32::saturating_add);
        (n, self.capped_ms + HOUR > now && self.capped_ms > 0)
    }

    /// The instances of this relay's own subtree within the last hour (not
    /// those other relays of a shared database passed on: they count
    /// them themselves).
    fn own_sdks(&self, now: u64) -> u32 {
        let own = self.instances.iter().filter(|i| i.2 + HOUR > now && !i.3);
        own.map(|i| i.1).fold(0u32, u32::saturating_add)
    }
}

impl Usage {
    /// An empty table; `forward`: keep what arrives for an upstream too.
    pub(crate) fn new(metrics: Metrics, forward: bool) -> Usage {
        Usage {
            inner: Mutex::new(Inner::default()),
            flag_series: Mutex::new(HashMap::new()),
            metrics,
            forward,
            started_ms: now_ms(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Counters only: usable after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a refused summary.
    pub(crate) fn refused(&self, field: &'static str) {
        let labels = vec![("result", "refused".to_owned()), ("field", field.to_owned())];
        self.metrics.usage_summaries.get_or_create(&labels).inc();
    }

    /// Adds a checked summary from the stream of SDK (or replica)
    /// `instance` in environment `env`, whose current data is `snap`;
    /// `replica`: the stream is a replica relay's, whose `instances` counts
    /// are taken (an SDK's stream stands for one instance, whatever it
    /// sends).
    pub(crate) fn ingest(
        &self,
        env: &str,
        instance: &str,
        replica: bool,
        snap: &Snapshot,
        s: pb::UsageSummary,
    ) {
        let from = if replica { Sender::Replica } else { Sender::Sdk };
        self.add(env, instance, from, snap, s);
    }

    /// Adds a checked summary a relay of a shared database passed on
    /// (`node`: its stable name): its `instances` are taken under that
    /// name, and it is not passed on again (that relay passed it to every
    /// relay itself). `row.own`: written by an earlier process of this
    /// very relay, whose SDKs are this process's now: their instances are
    /// not taken. `row.backlog`: passed on before this process started
    /// (taken at start): kept in the view, not counted in the metrics, so
    /// a restart does not add an hour's fallbacks to their rates at once.
    pub(crate) fn ingest_peer(
        &self,
        env: &str,
        node: &str,
        row: PeerRow,
        snap: &Snapshot,
        s: pb::UsageSummary,
    ) {
        self.add(env, node, Sender::Peer(row), snap, s);
    }

    fn add(&self, env: &str, instance: &str, from: Sender, snap: &Snapshot, s: pb::UsageSummary) {
        let replica = from != Sender::Sdk;
        let (peer, own, counted) = match from {
            Sender::Peer(row) => (true, row.own, !row.backlog),
            _ => (false, false, true),
        };
        let pass_on = self.forward && !peer;
        if counted {
            let labels = vec![("result", "accepted".to_owned()), ("field", String::new())];
            self.metrics.usage_summaries.get_or_create(&labels).inc();
        }
        let now = now_ms();
        let who = instance_hash(instance);
        let mut mismatches = 0u64;
        let mut totals = [0u64; 4];
        let mut per_flag: Vec<(String, u64)> = Vec::new();
        let mut inner = self.lock();
        let Inner { envs, keys, absent, dropped } = &mut *inner;
        let e = envs.entry(env.to_owned()).or_default();
        if s.untracked_evaluations > 0 {
            let b = e.untracked.bucket(LONG, HOUR, now);
            b.fallbacks[0] = b.fallbacks[0].saturating_add(s.untracked_evaluations);
            if pass_on {
                e.outbox.untracked = e.outbox.untracked.saturating_add(s.untracked_evaluations);
            }
        }
        for mut f in s.flags {
            for (t, x) in totals.iter_mut().zip(fallbacks(&f)) {
                *t = t.saturating_add(x);
            }
            let flag = snap.flag(&f.key);
            let n: u64 = fallbacks(&f).iter().fold(0, |a, b| a.saturating_add(*b));
            if n > 0 {
                // Keys that are no flag share one series: an SDK key must
                // not be able to take the real flags' series.
                let key = if flag.is_some() { f.key.clone() } else { UNKNOWN_FLAGS.to_owned() };
                per_flag.push((key, n));
            }
            clamp(&mut f, flag.map_or(0, |fl| fl.variations.len()));
            if !e.flags.contains_key(&f.key) && flag.is_none() {
                // A key that is no flag: only within the environment's share
                // (and the relay-wide bound); real flags always fit.
                if e.absent >= MAX_ABSENT_KEYS && e.recounted_ms + RECOUNT_MS <= now {
                    e.recount(snap, now, keys, absent);
                }
                if e.absent >= MAX_ABSENT_KEYS || *absent >= MAX_KEYS {
                    *dropped += 1;
                    continue;
                }
                e.absent += 1;
                *absent += 1;
            }
            let stats = match e.flags.get_mut(&f.key) {
                Some(st) => st,
                None => {
                    *keys += 1;
                    e.flags.entry(f.key.clone()).or_default()
                }
            };
            stats.last_seen_ms = now;
            stats.short.bucket(SHORT, FIVE_MINUTES, now).add(&f);
            stats.long.bucket(LONG, HOUR, now).add(&f);
            let evaluated = f.variations.iter().any(|n| *n > 0) || fallbacks(&f).iter().any(|n| *n > 0);
            if evaluated {
                stats.last_evaluated_ms = now;
            }
            // An earlier process of this relay reported its own SDKs, which
            // are (or were) this process's: not counted again.
            if evaluated && !own {
                // Only a replica stands for several instances (PROTOCOL.md
                // 4.1: an SDK sends 0; what it sends is ignored).
                let count = if replica { f.instances.max(1) } else { 1 };
                match stats.instances.iter_mut().find(|i| i.0 == who) {
                    Some(i) => *i = (who, count, now, peer),
                    None => {
                        stats.instances.retain(|i| i.2 + HOUR > now);
                        if stats.instances.len() < MAX_INSTANCES {
                            stats.instances.push((who, count, now, peer));
                        } else {
                            stats.capped_ms = now;
                        }
                    }
                }
            }
            let served: Vec<u32> =
                f.variations.iter().enumerate().filter(|(_, n)| **n > 0).map(|(i, _)| i as u32).collect();
            match served.as_slice() {
                [] => {}
                [v] if stats.sole == Some(*v) => {}
                // Only variation `v` from now on, as far as is known.
                [v] => (stats.sole, stats.sole_since_ms) = (Some(*v), now),
                // Several: the "one variation since" clock starts again.
                _ => (stats.sole, stats.sole_since_ms) = (None, now),
            }
            let mut unlisted = 0;
            for d in &f.defaults {
                match stats.defaults.iter_mut().find(|(t, _)| t == d) {
                    Some(seen) => seen.1 = now,
                    None => {
                        stats.defaults.retain(|(_, at)| at + DAY > now);
                        if stats.defaults.len() < MAX_DEFAULTS {
                            stats.defaults.push((d.clone(), now));
                        } else {
                            unlisted += 1;
                        }
                    }
                }
            }
            // `other_defaults` counts evaluations (sync.proto), as the
            // summary's own `other_defaults` added above.
            let other = unlisted_evaluations(&f, unlisted);
            if other > 0 {
                for b in [stats.short.bucket(SHORT, FIVE_MINUTES, now), stats.long.bucket(LONG, HOUR, now)] {
                    b.other_defaults = b.other_defaults.saturating_add(other);
                }
            }
            if !f.defaults.is_empty()
                && let Some(v) = majority(&stats.long.sum(LONG, HOUR, now))
                && let Some(value) = snap.flag(&f.key).and_then(|fl| fl.variations.get(v as usize))
                && f.defaults.iter().any(|d| differs(d, value))
            {
                mismatches += 1;
            }
            if pass_on {
                if e.outbox.since_ms == 0 {
                    e.outbox.since_ms = now;
                }
                let ds = e.outbox.defaults.entry(f.key.clone()).or_default();
                let mut unlisted = 0;
                for d in &f.defaults {
                    if ds.contains(d) {
                        continue;
                    }
                    match ds.len() < MAX_SUMMARY_DEFAULTS {
                        true => ds.push(d.clone()),
                        false => unlisted += 1,
                    }
                }
                let b = e.outbox.flags.entry(f.key.clone()).or_default();
                b.add(&f);
                // Defaults the forwarded summary cannot list: counted.
                b.other_defaults = b.other_defaults.saturating_add(unlisted_evaluations(&f, unlisted));
            }
        }
        self.metrics.usage_keys.set(*keys as i64);
        drop(inner);
        if !counted {
            return;
        }
        for (cause, n) in CAUSES.iter().zip(totals) {
            if n > 0 {
                let labels = vec![("environment", env.to_owned()), ("cause", (*cause).to_owned())];
                self.metrics.usage_fallbacks.get_or_create(&labels).inc_by(n);
            }
        }
        if mismatches > 0 {
            let labels = vec![("environment", env.to_owned())];
            self.metrics.usage_default_mismatches.get_or_create(&labels).inc_by(mismatches);
        }
        if !per_flag.is_empty() {
            let mut series = self.flag_series.lock().unwrap_or_else(|p| p.into_inner());
            let labelled = series.entry(env.to_owned()).or_default();
            for (key, n) in per_flag {
                // The first MAX_FLAG_SERIES flags of an environment with
                // fallbacks get their own series; later ones share one.
                let flag = if key == UNKNOWN_FLAGS
                    || labelled.contains(&key)
                    || (labelled.len() < MAX_FLAG_SERIES && labelled.insert(key.clone()))
                {
                    key
                } else {
                    OTHER_FLAGS.to_owned()
                };
                let labels = vec![("environment", env.to_owned()), ("flag", flag)];
                self.metrics.usage_flag_fallbacks.get_or_create(&labels).inc_by(n);
            }
        }
    }

    /// The usage of environment `env` (current data `snap`): every flag of
    /// `snap` and every key reported, or just `key`.
    pub(crate) fn view(&self, env: &str, snap: &Snapshot, key: Option<&str>) -> pb::GetUsageResponse {
        let now = now_ms();
        let inner = self.lock();
        let empty = EnvUsage::default();
        let e = inner.envs.get(env).unwrap_or(&empty);
        let mut keys: Vec<&str> = match key {
            Some(k) => vec![k],
            None => snap.flags().map(|f| f.key.as_str()).chain(e.flags.keys().map(String::as_str)).collect(),
        };
        keys.sort_unstable();
        keys.dedup();
        let none = FlagStats::default();
        let flags = keys
            .into_iter()
            .map(|k| {
                let st = e.flags.get(k).unwrap_or(&none);
                let flag = snap.flag(k);
                let hour = st.short.sum(SHORT, FIVE_MINUTES, now);
                let day = st.long.sum(LONG, HOUR, now);
                let maj = majority(&day);
                let value = maj.and_then(|v| flag.and_then(|f| f.variations.get(v as usize)));
                let defaults: Vec<pb::DefaultSeen> = st
                    .defaults
                    .iter()
                    .filter(|(_, at)| at + DAY > now)
                    .map(|(d, at)| pb::DefaultSeen {
                        json: d.clone(),
                        last_seen_unix_ms: *at,
                        mismatch: value.is_some_and(|v| differs(d, v)),
                    })
                    .collect();
                let (sdks, sdks_capped) = st.sdks(now);
                pb::FlagUsageView {
                    key: k.to_owned(),
                    exists: flag.is_some(),
                    // No such flag: no values (`exists` says so).
                    variation_values: flag
                        .map(|f| f.variations.iter().map(Json::to_string).collect())
                        .unwrap_or_default(),
                    hour: Some(window(&hour)),
                    default_mismatch: defaults.iter().any(|d| d.mismatch),
                    other_defaults_day: day.other_defaults,
                    day: Some(window(&day)),
                    sdks,
                    sdks_capped,
                    last_evaluated_unix_ms: st.last_evaluated_ms,
                    defaults,
                    majority_variation: maj.map_or(-1, |v| v as i32),
                    sole_variation: st.sole.map_or(-1, |v| v as i32),
                    sole_since_unix_ms: st.sole_since_ms,
                    flag_version: flag.map_or(0, |f| f.version),
                    flag_revision: flag.map_or(0, |f| f.revision),
                }
            })
            .collect();
        pb::GetUsageResponse {
            flags,
            collecting_since_unix_ms: self.started_ms,
            now_unix_ms: now,
            untracked_evaluations_day: e.untracked.sum(LONG, HOUR, now).fallbacks[0],
            dropped_keys: inner.dropped,
        }
    }

    /// A replica's summaries for its upstream: what its SDKs reported for
    /// `env` since the last call (each at most `MAX_FLAGS_PER_SUMMARY`
    /// flags and [`MAX_FORWARD_BYTES`] encoded), with the SDK instances per
    /// flag of the last hour.
    pub(crate) fn forward(&self, env: &str) -> Vec<pb::UsageSummary> {
        let now = now_ms();
        let mut inner = self.lock();
        let Some(e) = inner.envs.get_mut(env) else { return Vec::new() };
        let out = std::mem::take(&mut e.outbox);
        if out.flags.is_empty() && out.untracked == 0 {
            return Vec::new();
        }
        let mut defaults = out.defaults;
        let entries: Vec<pb::FlagUsage> = out
            .flags
            .into_iter()
            .map(|(key, b)| {
                let instances = e.flags.get(&key).map_or(0, |st| st.own_sdks(now));
                pb::FlagUsage {
                    // No defaults listed for the key: none passed.
                    defaults: defaults.remove(&key).unwrap_or_default(),
                    key,
                    variations: b.variations,
                    fallback_missing: b.fallbacks[0],
                    fallback_wrong_type: b.fallbacks[1],
                    fallback_malformed: b.fallbacks[2],
                    fallback_not_ready: b.fallbacks[3],
                    other_defaults: b.other_defaults,
                    last_evaluated_unix_ms: now,
                    instances,
                }
            })
            .collect();
        let mut summaries: Vec<pb::UsageSummary> = Vec::new();
        let mut bytes = 0usize;
        for entry in entries {
            // The entry as a field of the summary: tag and length prefix
            // (at most 1 + 3 bytes for an entry under 2 MiB).
            let len = entry.encoded_len() + 4;
            let full = summaries.last().is_none_or(|s| {
                s.flags.len() >= MAX_FLAGS_PER_SUMMARY
                    || bytes + len > MAX_FORWARD_BYTES - SUMMARY_HEADER_BYTES
            });
            if full {
                summaries.push(pb::UsageSummary {
                    start_unix_ms: out.since_ms,
                    end_unix_ms: now,
                    flags: Vec::new(),
                    untracked_evaluations: 0,
                });
                bytes = 0;
            }
            bytes += len;
            if let Some(s) = summaries.last_mut() {
                s.flags.push(entry);
            }
        }
        match summaries.first_mut() {
            Some(s) => s.untracked_evaluations = out.untracked,
            None => summaries.push(pb::UsageSummary {
                start_unix_ms: out.since_ms,
                end_unix_ms: now,
                flags: Vec::new(),
                untracked_evaluations: out.untracked,
            }),
        }
        summaries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, variations: Vec<u64>, defaults: &[&str]) -> pb::FlagUsage {
        pb::FlagUsage {
            key: key.into(),
            variations,
            defaults: defaults.iter().map(|d| (*d).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn windows_sdks_defaults_and_mismatch() {
        let set: flagstream::FlagSet = serde_json::from_str(
            r#"{"flags":[{"key":"kill","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
        )
        .unwrap();
        let snap = Snapshot::compile(&set, &flagstream::Limits::default()).unwrap();
        let u = Usage::new(Metrics::new(), true);
        let s = pb::UsageSummary { flags: vec![entry("kill", vec![0, 5], &["true"])], ..Default::default() };
        check(&s).unwrap();
        u.ingest("prod", "a", false, &snap, s.clone());
        u.ingest("prod", "b", false, &snap, s);
        let v = u.view("prod", &snap, None);
        let f = &v.flags[0];
        assert_eq!(f.key, "kill");
        assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 10]);
        assert_eq!(f.hour.as_ref().unwrap().variations, vec![0, 10]);
        assert_eq!((f.sdks, f.majority_variation, f.sole_variation), (2, 1, 1));
        assert!(f.default_mismatch && f.defaults[0].mismatch, "true passed, false served");
        let fwd = u.forward("prod");
        assert_eq!(fwd[0].flags[0].variations, vec![0, 10]);
        assert_eq!(fwd[0].flags[0].instances, 2);
        assert!(u.forward("prod").is_empty(), "forwarded once");
    }

    #[test]
    fn per_flag_fallback_series_are_bounded() {
        let flags: Vec<String> = (0..MAX_FLAG_SERIES + 5)
            .map(|i| format!(r#"{{"key":"f{i}","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{{"variation":0}}}}"#))
            .collect();
        let set: flagstream::FlagSet =
            serde_json::from_str(&format!(r#"{{"flags":[{}]}}"#, flags.join(","))).unwrap();
        let snap = Snapshot::compile(&set, &flagstream::Limits::default()).unwrap();
        let metrics = Metrics::new();
        let u = Usage::new(metrics.clone(), false);
        let wrong_type = |key: String| pb::FlagUsage { key, fallback_wrong_type: 2, ..Default::default() };
        // Made-up keys first: they must not take the real flags' series.
        let made_up = (0..MAX_FLAG_SERIES).map(|i| wrong_type(format!("typo-{i}"))).collect();
        u.ingest("prod", "a", false, &snap, pb::UsageSummary { flags: made_up, ..Default::default() });
        let real = (0..MAX_FLAG_SERIES + 5).map(|i| wrong_type(format!("f{i}"))).collect();
        u.ingest("prod", "a", false, &snap, pb::UsageSummary { flags: real, ..Default::default() });
        let value = |flag: &str| {
            let labels = vec![("environment", "prod".to_owned()), ("flag", flag.to_owned())];
            metrics.usage_flag_fallbacks.get_or_create(&labels).get()
        };
        assert_eq!(
            value(UNKNOWN_FLAGS),
            2 * MAX_FLAG_SERIES as u64,
            "every made-up key's fallbacks, in one series"
        );
        assert_eq!(value("f0"), 2);
        assert_eq!(value(&format!("f{}", MAX_FLAG_SERIES - 1)), 2);
        assert_eq!(value(OTHER_FLAGS), 10, "the 5 flags past the bound share one series");
        let text = metrics.render();
        let series = text.lines().filter(|l| l.starts_with("flagstream_usage_flag_fallbacks_total{")).count();
        assert_eq!(series, MAX_FLAG_SERIES + 2, "100 flags, _other and _unknown");
    }

    #[test]
    fn made_up_keys_take_only_their_environments_share() {
        let snap = Snapshot::empty();
        let u = Usage::new(Metrics::new(), false);
        for chunk in 0..3 {
            let flags = (0..1000).map(|i| entry(&format!("junk-{chunk}-{i}"), vec![1], &[])).collect();
            u.ingest("noisy", "a", false, &snap, pb::UsageSummary { flags, ..Default::default() });
        }
        let v = u.view("noisy", &snap, None);
        assert_eq!(v.flags.len(), MAX_ABSENT_KEYS);
        assert_eq!(v.dropped_keys, 3000 - MAX_ABSENT_KEYS as u64);
        u.ingest(
            "quiet",
            "b",
            false,
            &snap,
            pb::UsageSummary { flags: vec![entry("gone", vec![], &[])], ..Default::default() },
        );
        assert_eq!(u.view("quiet", &snap, None).flags.len(), 1, "another environment still has room");
    }

    #[test]
    fn bounds_name_the_field() {
        let many = pb::UsageSummary {
            flags: (0..=MAX_FLAGS_PER_SUMMARY).map(|i| entry(&format!("k{i}"), vec![1], &[])).collect(),
            ..Default::default()
        };
        assert_eq!(check(&many).unwrap_err().field, "usage.flags");
        let long =
            pb::UsageSummary { flags: vec![entry(&"k".repeat(300), vec![], &[])], ..Default::default() };
        assert_eq!(check(&long).unwrap_err().field, "usage.flags.key");
        let d = "x".repeat(MAX_DEFAULT_BYTES + 1);
        let big = pb::UsageSummary { flags: vec![entry("k", vec![], &[&d])], ..Default::default() };
        assert_eq!(check(&big).unwrap_err().field, "usage.flags.defaults");
    }
    fn kill_switch() -> Snapshot {
        let set: flagstream::FlagSet = serde_json::from_str(
            r#"{"flags":[{"key":"kill","type":"bool","variations":[true,false],"on":false,"off_variation":1,"fallthrough":{"variation":0}}]}"#,
        )
        .unwrap();
        Snapshot::compile(&set, &flagstream::Limits::default()).unwrap()
    }

    #[test]
    fn variation_counts_are_clamped_to_the_flag() {
        let snap = kill_switch();
        let u = Usage::new(Metrics::new(), true);
        let mut counts = vec![1u64; MAX_VARIATIONS];
        counts[1] = 7;
        let mut junk = entry("junk", vec![3; MAX_VARIATIONS], &[]);
        junk.fallback_missing = 2;
        let s = pb::UsageSummary { flags: vec![entry("kill", counts, &[]), junk], ..Default::default() };
        check(&s).unwrap();
        u.ingest("prod", "a", false, &snap, s);
        let v = u.view("prod", &snap, None);
        let kill = v.flags.iter().find(|f| f.key == "kill").unwrap();
        assert_eq!(kill.day.as_ref().unwrap().variations, vec![1, 7], "2 variations, 2 counts");
        assert_eq!(kill.hour.as_ref().unwrap().variations, vec![1, 7]);
        let junk = v.flags.iter().find(|f| f.key == "junk").unwrap();
        assert!(junk.day.as_ref().unwrap().variations.is_empty(), "no flag: fallbacks only");
        assert_eq!(junk.day.as_ref().unwrap().fallback_missing, 2);
        let fwd = u.forward("prod");
        for f in &fwd[0].flags {
            assert!(f.variations.len() <= 2, "{}: {:?}", f.key, f.variations);
        }
    }

    #[test]
    fn made_up_keys_never_displace_real_flags() {
        let snap = kill_switch();
        let u = Usage::new(Metrics::new(), false);
        // Fill the relay-wide bound of keys that are no flag.
        for env in 0..MAX_KEYS / 1000 {
            let flags = (0..1000).map(|i| entry(&format!("junk-{i}"), vec![], &[])).collect();
            u.ingest(
                &format!("env-{env}"),
                "a",
                false,
                &snap,
                pb::UsageSummary { flags, ..Default::default() },
            );
        }
        assert_eq!(u.lock().absent, MAX_KEYS);
        let s = pb::UsageSummary {
            flags: vec![entry("more-junk", vec![], &[]), entry("kill", vec![0, 1], &[])],
            ..Default::default()
        };
        u.ingest("env-0", "a", false, &snap, s.clone());
        u.ingest("fresh", "a", false, &snap, s);
        for env in ["env-0", "fresh"] {
            let v = u.view(env, &snap, Some("kill"));
            assert_eq!(
                v.flags[0].day.as_ref().unwrap().variations,
                vec![0, 1],
                "{env}: the real flag is kept"
            );
            assert_eq!(u.view(env, &snap, Some("more-junk")).flags[0].last_evaluated_unix_ms, 0);
        }
        assert_eq!(u.view("fresh", &snap, None).dropped_keys, 2);
    }

    #[test]
    fn instances_only_from_replicas() {
        let snap = kill_switch();
        let u = Usage::new(Metrics::new(), false);
        let mut e = entry("kill", vec![0, 1], &[]);
        e.instances = u32::MAX;
        u.ingest(
            "prod",
            "sdk",
            false,
            &snap,
            pb::UsageSummary { flags: vec![e.clone()], ..Default::default() },
        );
        assert_eq!(u.view("prod", &snap, Some("kill")).flags[0].sdks, 1, "an SDK stream is one instance");
        e.instances = 5;
        u.ingest("prod", "replica", true, &snap, pb::UsageSummary { flags: vec![e], ..Default::default() });
        assert_eq!(u.view("prod", &snap, Some("kill")).flags[0].sdks, 6, "a replica stands for its subtree");
    }

    /// What another relay of a shared database passed on counts here, but
    /// is not passed on again: neither its evaluations nor its instances.
    #[test]
    fn a_peers_usage_is_counted_but_not_passed_back() {
        let snap = kill_switch();
        let u = Usage::new(Metrics::new(), true);
        let one = pb::UsageSummary { flags: vec![entry("kill", vec![0, 2], &[])], ..Default::default() };
        u.ingest("prod", "sdk", false, &snap, one);
        let mut theirs = entry("kill", vec![0, 7], &[]);
        theirs.instances = 3;
        u.ingest_peer(
            "prod",
            "relay-b",
            PeerRow::default(),
            &snap,
            pb::UsageSummary { flags: vec![theirs.clone()], ..Default::default() },
        );
        let f = &u.view("prod", &snap, Some("kill")).flags[0];
        assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 9]);
        assert_eq!(f.sdks, 4, "this relay's SDK and the other relay's three");
        let out = u.forward("prod");
        assert_eq!(out[0].flags[0].variations, vec![0, 2], "only this relay's own evaluations go out");
        assert_eq!(out[0].flags[0].instances, 1, "only this relay's own instances");
        // An earlier process of this relay: its evaluations count, its
        // instances (this process's SDKs now) do not.
        let own = PeerRow { own: true, backlog: true };
        u.ingest_peer(
            "prod",
            "this-relay",
            own,
            &snap,
            pb::UsageSummary { flags: vec![theirs], ..Default::default() },
        );
        let f = &u.view("prod", &snap, Some("kill")).flags[0];
        assert_eq!(f.day.as_ref().unwrap().variations, vec![0, 16]);
        assert_eq!(f.sdks, 4, "no SDK counted twice");
    }

    /// Rows taken as a backlog at start are in the view, not in the
    /// metrics (a restart must not add an hour of fallbacks to their rate).
    #[test]
    fn a_backlog_is_not_counted_in_the_metrics() {
        let snap = kill_switch();
        let metrics = Metrics::new();
        let u = Usage::new(metrics.clone(), true);
        let mut e = entry("kill", vec![], &[]);
        e.fallback_wrong_type = 4;
        let row = PeerRow { own: false, backlog: true };
        u.ingest_peer(
            "prod",
            "relay-b",
            row,
            &snap,
            pb::UsageSummary { flags: vec![e.clone()], ..Default::default() },
        );
        let fallbacks = |m: &Metrics| {
            let labels = vec![("environment", "prod".to_owned()), ("cause", "wrong_type".to_owned())];
            m.usage_fallbacks.get_or_create(&labels).get()
        };
        assert_eq!(fallbacks(&metrics), 0);
        assert_eq!(u.view("prod", &snap, Some("kill")).flags[0].day.as_ref().unwrap().fallback_wrong_type, 4);
        u.ingest_peer(
            "prod",
            "relay-b",
            PeerRow::default(),
            &snap,
            pb::UsageSummary { flags: vec![e], ..Default::default() },
        );
        assert_eq!(fallbacks(&metrics), 4, "a row passed on after the start is counted");
    }

    #[test]
    fn other_defaults_count_evaluations() {
        let snap = kill_switch();
        let u = Usage::new(Metrics::new(), true);
        for (i, d) in ["1", "2", "3", "4"].iter().enumerate() {
            u.ingest(
                "prod",
                &format!("s{i}"),
                false,
                &snap,
                pb::UsageSummary { flags: vec![entry("kill", vec![1], &[d])], ..Default::default() },
            );
        }
        // A fifth default, 10 evaluations, 2 more with defaults the SDK
        // could not list: 12 evaluations with other defaults.
        let mut e = entry("kill", vec![6, 4], &["5"]);
        e.other_defaults = 2;
        e.fallback_missing = 2;
        u.ingest("prod", "s5", false, &snap, pb::UsageSummary { flags: vec![e], ..Default::default() });
        let f = &u.view("prod", &snap, Some("kill")).flags[0];
        assert_eq!(f.defaults.len(), MAX_DEFAULTS);
        assert_eq!(f.other_defaults_day, 12);
        let fwd = u.forward("prod");
        assert_eq!(fwd[0].flags[0].defaults.len(), MAX_SUMMARY_DEFAULTS);
        assert_eq!(fwd[0].flags[0].other_defaults, 12, "the outbox counts the default it cannot list");
    }

    #[test]
    fn forwarded_summaries_stay_under_the_byte_bound() {
        let snap = Snapshot::empty();
        let u = Usage::new(Metrics::new(), true);
        // A JSON string of exactly MAX_DEFAULT_BYTES bytes.
        let d = |i: usize, j: usize| format!("\"{i:04}-{j}-{}\"", "x".repeat(MAX_DEFAULT_BYTES - 9));
        // The worst case check() admits: 1,000 keys of 256 bytes, each
        // with 4 defaults of 256 bytes (keys that are no flag: no variation
        // counts survive).
        let flags: Vec<pb::FlagUsage> = (0..MAX_FLAGS_PER_SUMMARY)
            .map(|i| {
                let ds: Vec<String> = (0..4).map(|j| d(i, j)).collect();
                let mut e = entry(&format!("{i:0>256}"), vec![u64::MAX; MAX_VARIATIONS], &[]);
                e.defaults = ds;
                e.fallback_missing = u64::MAX;
                e
            })
            .collect();
        let s = pb::UsageSummary { flags, untracked_evaluations: u64::MAX, ..Default::default() };
        assert!(s.flags.iter().all(|f| f.defaults.iter().all(|d| d.len() == MAX_DEFAULT_BYTES)));
        check(&s).unwrap();
        assert!(s.encoded_len() > 1 << 20, "the case is over the upstream's limit unsplit");
        u.ingest("prod", "a", false, &snap, s);
        let fwd = u.forward("prod");
        assert!(fwd.len() >= 3, "{} summaries", fwd.len());
        for m in &fwd {
            assert!(m.encoded_len() <= MAX_FORWARD_BYTES, "{} bytes", m.encoded_len());
            assert!(check(m).is_ok());
        }
        assert_eq!(fwd.iter().map(|m| m.flags.len()).sum::<usize>(), MAX_FLAGS_PER_SUMMARY);
        assert_eq!(fwd[0].untracked_evaluations, u64::MAX);
    }
}
