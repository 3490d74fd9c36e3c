//! Flag usage reported by SDKs (PROTOCOL.md "Usage summaries"): checked
//! against the summary bounds, added to per-environment, per-flag windows
//! (the last hour in 12 five-minute buckets, the last day in 24 hourly
//! ones), SDK instances and defaults seen; read by `GetUsage` (admin) and,
//! on a replica, forwarded upstream as the replica's own summaries; on a
//! shared database, passed to the other relays through it (`feed/usage.rs`)
//! and taken from them.
//!
//! May use `store` (the flags an environment has) and `ops` only.
//!
//! Bounded: per environment its flags (always admitted) plus at most
//! [`MAX_ABSENT_KEYS`] keys that are no flag (a deleted flag's key joins
//! them as soon as the environment's data changes; past the share the
//! least recently reported go), at most [`MAX_KEYS`] such keys over all
//! environments (further keys dropped and counted per environment), per
//! flag at most [`MAX_INSTANCES`] instances and [`MAX_DEFAULT_CANDIDATES`]
//! defaults told apart, per bucket at most as many variation counts as the
//! flag has variations (none for a key that is no flag; ARCHITECTURE.md
//! "Usage reporting" gives the memory formula). A deleted environment's
//! usage and series go with it. In memory only: a restart starts over
//! (`collecting_since_unix_ms`), except that a relay of a shared database
//! takes the last hour the other relays passed on again.
//!
//! Each environment's usage has its own lock, and the table of them is
//! locked only to find or add one: reading one environment's usage
//! (`view.rs`, on the blocking pool) never holds up another's ingest.
//! The parts: `check.rs` (a summary's bounds), `window.rs` (counts over
//! time), `view.rs` (`GetUsage`, paged), `forward.rs` (passing usage on).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use flagstream::Snapshot;
use flagstream_proto::v1 as pb;

use crate::ops::metrics::Metrics;
use crate::store::now_ms;

mod check;
mod forward;
#[cfg(test)]
mod tests;
mod view;
mod window;

pub(crate) use check::{OverBound, check};
pub(crate) use view::Keys;
use window::{Bucket, Ring, clamp, fallbacks, majority, unlisted_evaluations};

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
pub(crate) const SUMMARY_HEADER_BYTES: usize = 64;
/// Keys per environment that are no flag of it (SDKs asking for missing
/// flags): a key holder cannot fill the table with made-up keys beyond
/// this, nor touch another environment's share.
pub(crate) const MAX_ABSENT_KEYS: usize = 1_024;
/// Summaries one stream may send per minute (a sender with 100,000 flags
/// needs 100); further ones are refused (`field` `usage.rate`).
pub(crate) const MAX_SUMMARIES_PER_MINUTE: u32 = 128;
/// SDK instances told apart per flag (`sdks_capped` beyond).
pub(crate) const MAX_INSTANCES: usize = 64;
/// Defaults listed per flag: those seen from the most SDK instances.
pub(crate) const MAX_DEFAULTS: usize = 4;
/// Defaults told apart per flag (the listed ones are chosen among them;
/// further ones counted as "other").
pub(crate) const MAX_DEFAULT_CANDIDATES: usize = 8;
/// Most defaults one summary entry may list.
pub(crate) const MAX_SUMMARY_DEFAULTS: usize = flagstream::usage::MAX_DEFAULTS;

pub(crate) const FIVE_MINUTES: u64 = 300_000;
pub(crate) const HOUR: u64 = 3_600_000;
pub(crate) const DAY: u64 = 24 * HOUR;
/// Buckets: 12 × 5 minutes, 24 × 1 hour.
pub(crate) const SHORT: usize = 12;
pub(crate) const LONG: usize = 24;

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

/// A default a flag's callers pass, as seen here.
#[derive(Debug, Clone)]
struct DefaultStat {
    /// Compact JSON text.
    json: String,
    last_seen_ms: u64,
    /// SDK instances (hash, last seen) that listed it within a day, at
    /// most [`MAX_INSTANCES`].
    instances: Vec<(u64, u64)>,
}

/// One flag's usage.
#[derive(Debug, Default)]
struct FlagStats {
    short: Ring,
    long: Ring,
    /// At most [`MAX_DEFAULT_CANDIDATES`], none older than a day.
    defaults: Vec<DefaultStat>,
    /// When a summary last listed a default other than the value the flag
    /// serves most (listed here or not).
    mismatch_ms: u64,
    /// (instance hash, instances it stands for, last seen, whether it is
    /// another relay of a shared database).
    instances: Vec<(u64, u32, u64, bool)>,
    /// When an instance last found the table full.
    capped_ms: u64,
    last_evaluated_ms: u64,
    /// When a summary last named the key (keys that are no flag go after a
    /// day without one, and the least recently named first past the share).
    last_seen_ms: u64,
    sole: Option<u32>,
    sole_since_ms: u64,
}

impl FlagStats {
    /// Counts default `json` listed by instance `who`. Full, a default
    /// listed by a single instance within the day gives way (the least
    /// recently seen); one listed by several does not, so one stream
    /// sending made-up defaults cannot push out what a fleet passes (a
    /// key holder opening more streams than the fleet has instances can
    /// still outrank it in the list, never hide its mismatch:
    /// `mismatch_ms`). `false`: not listed.
    /// The caller ages the list first ([`FlagStats::age_defaults`]).
    fn see_default(&mut self, json: &str, who: u64, now: u64) -> bool {
        if let Some(d) = self.defaults.iter_mut().find(|d| d.json == json) {
            d.last_seen_ms = now;
            match d.instances.iter().position(|i| i.0 == who) {
                Some(at) => d.instances[at].1 = now,
                None if d.instances.len() < MAX_INSTANCES => d.instances.push((who, now)),
                None => {}
            }
            return true;
        }
        let fresh = DefaultStat { json: json.to_owned(), last_seen_ms: now, instances: vec![(who, now)] };
        if self.defaults.len() < MAX_DEFAULT_CANDIDATES {
            self.defaults.push(fresh);
            return true;
        }
        let weakest =
            self.defaults.iter_mut().filter(|d| d.instances.len() <= 1).min_by_key(|d| d.last_seen_ms);
        match weakest {
            Some(d) => {
                *d = fresh;
                true
            }
            None => false,
        }
    }

    /// Drops the defaults and their instances not seen within a day (once
    /// per summary entry).
    fn age_defaults(&mut self, now: u64) {
        self.defaults.retain(|d| d.last_seen_ms + DAY > now);
        for d in &mut self.defaults {
            d.instances.retain(|i| i.1 + DAY > now);
        }
    }

    /// The listed defaults: those seen from the most instances within a
    /// day (then the most recently seen), at most [`MAX_DEFAULTS`].
    fn listed_defaults(&self, now: u64) -> Vec<&DefaultStat> {
        let mut ds: Vec<&DefaultStat> = self.defaults.iter().filter(|d| d.last_seen_ms + DAY > now).collect();
        ds.sort_by(|a, b| {
            b.instances.len().cmp(&a.instances.len()).then(b.last_seen_ms.cmp(&a.last_seen_ms))
        });
        ds.truncate(MAX_DEFAULTS);
        ds
    }

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
    /// Keys in `flags` that are no flag of the environment's data as of
    /// `generation`.
    absent: usize,
    /// The snapshot generation `absent` was counted against.
    generation: u64,
    /// Summary entries dropped: keys that are no flag past the share.
    dropped: u64,
    /// The environment was deleted: what still arrives for it is dropped
    /// (set under this lock by [`Usage::forget_env`]).
    gone: bool,
    untracked: Ring,
    outbox: Outbox,
}

/// Keys held over all environments.
#[derive(Debug, Default)]
struct Counts {
    keys: AtomicUsize,
    /// Of `keys`, those that are no flag (the sum of `EnvUsage::absent`).
    absent: AtomicUsize,
}

impl Counts {
    /// Takes a place for a key that is no flag, within [`MAX_KEYS`].
    fn take_absent(&self) -> bool {
        self.absent
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < MAX_KEYS).then_some(n + 1))
            .is_ok()
    }
}

impl EnvUsage {
    /// The environment's data changed (`snap`): a key that is no flag of
    /// it any more (a deleted flag) joins the keys that are no flag at
    /// once; those no summary named for a day go, and past the share the
    /// least recently named go. Adjusts the totals.
    fn reclassify(&mut self, snap: &Snapshot, now: u64, counts: &Counts) {
        self.generation = snap.generation();
        let before = self.flags.len();
        self.flags.retain(|k, st| snap.contains(k) || st.last_seen_ms + DAY > now);
        let mut n = self.flags.keys().filter(|k| !snap.contains(k)).count();
        if n > MAX_ABSENT_KEYS {
            let mut absent: Vec<(u64, String)> = self
                .flags
                .iter()
                .filter(|(k, _)| !snap.contains(k))
                .map(|(k, st)| (st.last_seen_ms, k.clone()))
                .collect();
            absent.sort_unstable();
            for (_, k) in absent.drain(..n - MAX_ABSENT_KEYS) {
                self.flags.remove(&k);
            }
            n = MAX_ABSENT_KEYS;
        }
        counts.keys.fetch_sub(before - self.flags.len(), Ordering::Relaxed);
        if n >= self.absent {
            counts.absent.fetch_add(n - self.absent, Ordering::Relaxed);
        } else {
            counts.absent.fetch_sub(self.absent - n, Ordering::Relaxed);
        }
        self.absent = n;
        self.outbox.flags.retain(|k, _| self.flags.contains_key(k));
        self.outbox.defaults.retain(|k, _| self.flags.contains_key(k));
    }
}

/// The relay's usage table.
#[derive(Debug)]
pub(crate) struct Usage {
    /// Per environment, each behind its own lock.
    envs: RwLock<HashMap<String, Arc<Mutex<EnvUsage>>>>,
    counts: Counts,
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

/// Counters only: usable after a panic elsewhere.
fn lock(env: &Mutex<EnvUsage>) -> MutexGuard<'_, EnvUsage> {
    env.lock().unwrap_or_else(|p| p.into_inner())
}

fn instance_hash(id: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut h);
    h.finish()
}

/// Whether a default (JSON text) differs from a served value.
fn differs(default: &str, value: &serde_json::Value) -> bool {
    match serde_json::from_str::<serde_json::Value>(default) {
        Ok(d) => match (d.as_f64(), value.as_f64()) {
            (Some(a), Some(b)) => a != b,
            _ => &d != value,
        },
        // Not JSON: not the value.
        Err(_) => true,
    }
}

impl Usage {
    /// An empty table; `forward`: keep what arrives for an upstream too.
    pub(crate) fn new(metrics: Metrics, forward: bool) -> Usage {
        Usage {
            envs: RwLock::new(HashMap::new()),
            counts: Counts::default(),
            flag_series: Mutex::new(HashMap::new()),
            metrics,
            forward,
            started_ms: now_ms(),
        }
    }

    /// The environment's usage, if any was reported.
    fn env_cell(&self, env: &str) -> Option<Arc<Mutex<EnvUsage>>> {
        self.envs.read().unwrap_or_else(|p| p.into_inner()).get(env).cloned()
    }

    /// The environment's usage, added empty when new.
    fn env_cell_or_new(&self, env: &str) -> Arc<Mutex<EnvUsage>> {
        if let Some(cell) = self.env_cell(env) {
            return cell;
        }
        let mut envs = self.envs.write().unwrap_or_else(|p| p.into_inner());
        envs.entry(env.to_owned()).or_default().clone()
    }

    /// Keys held over all environments (the `usage_keys` gauge).
    pub(crate) fn keys(&self) -> usize {
        self.counts.keys.load(Ordering::Relaxed)
    }

    /// Forgets a deleted environment: its usage, and its usage series (a
    /// new environment of the same name starts empty).
    pub(crate) fn forget_env(&self, env: &str) {
        let removed = self.envs.write().unwrap_or_else(|p| p.into_inner()).remove(env);
        if let Some(cell) = removed {
            let mut e = lock(&cell);
            // A summary that took the entry before it was removed finds it
            // gone and adds nothing: the totals stay exact.
            e.gone = true;
            self.counts.keys.fetch_sub(e.flags.len(), Ordering::Relaxed);
            self.counts.absent.fetch_sub(e.absent, Ordering::Relaxed);
        }
        self.metrics.usage_keys.set(self.keys() as i64);
        for cause in CAUSES {
            self.metrics
                .usage_fallbacks
                .remove(&vec![("environment", env.to_owned()), ("cause", cause.to_owned())]);
        }
        self.metrics.usage_default_mismatches.remove(&vec![("environment", env.to_owned())]);
        // No entry: no flag of the environment had a series of its own.
        let labelled =
            self.flag_series.lock().unwrap_or_else(|p| p.into_inner()).remove(env).unwrap_or_default();
        for flag in labelled.into_iter().chain([OTHER_FLAGS.to_owned(), UNKNOWN_FLAGS.to_owned()]) {
            self.metrics.usage_flag_fallbacks.remove(&vec![("environment", env.to_owned()), ("flag", flag)]);
        }
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
        deleted: &AtomicBool,
        env: &str,
        instance: &str,
        replica: bool,
        snap: &Snapshot,
        s: pb::UsageSummary,
    ) {
        let from = if replica { Sender::Replica } else { Sender::Sdk };
        self.add(deleted, env, instance, from, snap, s);
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
        deleted: &AtomicBool,
        env: &str,
        node: &str,
        row: PeerRow,
        snap: &Snapshot,
        s: pb::UsageSummary,
    ) {
        self.add(deleted, env, node, Sender::Peer(row), snap, s);
    }

    /// `deleted`: the environment's deleted mark (`Env::deleted`), set
    /// before its usage is forgotten: read under the environment's usage
    /// lock, a summary racing the deletion adds nothing (not even a new,
    /// empty entry).
    fn add(
        &self,
        deleted: &AtomicBool,
        env: &str,
        instance: &str,
        from: Sender,
        snap: &Snapshot,
        s: pb::UsageSummary,
    ) {
        let replica = from != Sender::Sdk;
        let (peer, own, counted) = match from {
            Sender::Peer(row) => (true, row.own, !row.backlog),
            _ => (false, false, true),
        };
        let pass_on = self.forward && !peer;
        let now = now_ms();
        let who = instance_hash(instance);
        let mut mismatches = 0u64;
        let mut totals = [0u64; 4];
        let mut per_flag: Vec<(String, u64)> = Vec::new();
        if deleted.load(Ordering::Acquire) {
            return;
        }
        let cell = self.env_cell_or_new(env);
        let mut guard = lock(&cell);
        // Deleted meanwhile: `forget_env` took the entry out (this one is
        // gone) or will find this new one (and the mark is set already).
        if guard.gone || deleted.load(Ordering::Acquire) {
            // An empty entry this call made after the usage was forgotten
            // goes again (never one holding anything: a new environment of
            // the name may have reported already).
            let empty = !guard.gone && guard.flags.is_empty();
            drop(guard);
            if empty {
                let mut envs = self.envs.write().unwrap_or_else(|p| p.into_inner());
                if envs.get(env).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
                    envs.remove(env);
                }
            }
            return;
        }
        if counted {
            let labels = vec![("result", "accepted".to_owned()), ("field", String::new())];
            self.metrics.usage_summaries.get_or_create(&labels).inc();
        }
        // Generations only grow: a summary read against an older snapshot
        // does not reclassify back to it.
        if snap.generation() > guard.generation {
            guard.reclassify(snap, now, &self.counts);
        }
        let e = &mut *guard;
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
            let flag = snap.info(&f.key);
            let n: u64 = fallbacks(&f).iter().fold(0, |a, b| a.saturating_add(*b));
            if n > 0 {
                // Keys that are no flag share one series: an SDK key must
                // not be able to take the real flags' series.
                let key = if flag.is_some() { f.key.clone() } else { UNKNOWN_FLAGS.to_owned() };
                per_flag.push((key, n));
            }
            clamp(&mut f, flag.map_or(0, |fl| fl.variations));
            if !e.flags.contains_key(&f.key) && flag.is_none() {
                // A key that is no flag: only within the environment's share
                // (and the relay-wide bound); real flags always fit.
                if e.absent >= MAX_ABSENT_KEYS || !self.counts.take_absent() {
                    e.dropped += 1;
                    continue;
                }
                e.absent += 1;
            }
            let stats = match e.flags.get_mut(&f.key) {
                Some(st) => st,
                None => {
                    self.counts.keys.fetch_add(1, Ordering::Relaxed);
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
            if !f.defaults.is_empty() {
                stats.age_defaults(now);
            }
            for d in &f.defaults {
                if !stats.see_default(d, who, now) {
                    unlisted += 1;
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
            // Judged on every default the summary lists, listed here or
            // not: filling a flag's default slots cannot hide a mismatch.
            if !f.defaults.is_empty()
                && let Some(v) = majority(&stats.long.sum(LONG, HOUR, now))
                && let Some(value) = snap.variation(&f.key, v as usize)
                && f.defaults.iter().any(|d| differs(d, &value))
            {
                mismatches += 1;
                stats.mismatch_ms = now;
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
        drop(guard);
        self.metrics.usage_keys.set(self.keys() as i64);
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
}
