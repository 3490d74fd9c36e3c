//! The client services link: a builder, lock-free typed evaluation over the
//! current snapshot, status, counters and change listeners. The sync task
//! (`sync.rs`) feeds it; a flag file or in-code test data can instead.
//!
//! Evaluation is a synchronous function: one atomic load of the snapshot,
//! one hash lookup, the rules; no I/O, no await, no lock. It is safe inside
//! a database transaction.

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::seq::SliceRandom;
use serde_json::Value as Json;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::cache::Cache;
use crate::follow::FollowConfig;
use crate::replica::Replica;
use crate::stats::{Counters, Stats};
use crate::status::{Source, Status};
use crate::sync;
use crate::{
    Context, Detail, ErrorKind, FlagHandle, FlagSet, FromValue, Limits, Reason, Snapshot, SnapshotCell,
};

/// Applied revisions kept for slow change listeners before they lag.
const CHANGE_BUFFER: usize = 64;

/// Unix time in ms.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// One applied revision and the flag keys it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The new revision.
    pub revision: u64,
    /// Flags added, changed or removed (all flags for a full snapshot).
    pub flags: Arc<[String]>,
}

/// State shared by the client handles and the sync task.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) cell: SnapshotCell,
    /// Set once any data has been published.
    pub(crate) ready: AtomicBool,
    /// Whether the served data is stale (read on every detail call).
    pub(crate) stale: AtomicBool,
    /// The relay's `staleness_ms` in its latest heartbeat: how old its own
    /// data was (0 on a primary; a replica cut off from its upstream says
    /// how long). Part of [`Client::data_age`].
    pub(crate) relay_staleness_ms: std::sync::atomic::AtomicU64,
    /// When the served data was last confirmed current (Unix ms; 0: never).
    pub(crate) confirmed_unix_ms: std::sync::atomic::AtomicU64,
    pub(crate) status: watch::Sender<Status>,
    pub(crate) counters: Counters,
    pub(crate) changes: broadcast::Sender<Change>,
    pub(crate) cache_tx: Option<watch::Sender<Option<Arc<Replica>>>>,
}

/// Owns the background tasks; they stop when the last client handle goes.
#[derive(Debug)]
struct Tasks {
    handles: Vec<JoinHandle<()>>,
    /// The cache and the newest replica, for the final write at drop.
    cache: Option<FinalWrite>,
}

#[derive(Debug)]
struct FinalWrite {
    shared: Arc<Shared>,
    /// The one long-lived handle: dropping it closes sled.
    cache: Arc<Cache>,
    latest: watch::Receiver<Option<Arc<Replica>>>,
    key_fingerprint: u64,
}

impl Tasks {
    fn none() -> Tasks {
        Tasks { handles: Vec::new(), cache: None }
    }
}

impl Drop for Tasks {
    /// Stops the sync and cache tasks, then writes the newest applied
    /// revision to the cache if the debounced writer had not yet (a few
    /// milliseconds of blocking I/O, once, when the last clone goes).
    fn drop(&mut self) {
        for t in &self.handles {
            t.abort();
        }
        if let Some(f) = self.cache.take() {
            let latest = f.latest.borrow().clone();
            match f.cache.close(latest.as_ref(), f.key_fingerprint) {
                Ok(true) => crate::stats::bump(&f.shared.counters.cache_writes),
                Ok(false) => {}
                Err(e) => {
                    crate::stats::bump(&f.shared.counters.cache_errors);
                    tracing::warn!(error = %e, "writing the flag cache at shutdown failed");
                }
            }
        }
    }
}

/// A flagstream client. Cheap to clone; all clones share one snapshot and
/// one sync task.
#[derive(Debug, Clone)]
pub struct Client {
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

/// Why a client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Neither endpoints nor an offline source were given.
    #[error("no endpoints: call .endpoints([...]) or use an offline source")]
    NoEndpoints,
    /// Streaming needs an SDK key.
    #[error("no SDK key: call .sdk_key(...)")]
    NoSdkKey,
    /// An endpoint is not a URL.
    #[error("endpoint {0:?} is not an http:// or https:// URL")]
    BadEndpoint(String),
    /// The flag file could not be read.
    #[error("flag file {path}")]
    File {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A setting is out of range.
    #[error("invalid setting: {0}")]
    Config(String),
    /// `build()` was called outside a Tokio runtime.
    #[error("build() must run inside a Tokio runtime (the sync task is spawned on it)")]
    NoRuntime,
}

/// Builder for [`Client`]; every setting has a production default.
#[derive(Debug, Clone)]
pub struct Builder {
    cfg: FollowConfig,
    limits: Limits,
    cache_dir: Option<PathBuf>,
    cache_interval: Duration,
    file: Option<PathBuf>,
    test_data: Option<FlagSet>,
    shuffle: bool,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cfg: FollowConfig::default(),
            limits: Limits::default(),
            cache_dir: None,
            cache_interval: Duration::from_millis(500),
            file: None,
            test_data: None,
            shuffle: true,
        }
    }
}

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident: $t:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, v: $t) -> Self {
            self.cfg.$name = v;
            self
        }
    };
}

impl Builder {
    /// Relay URLs (`http://host:port`). The order is shuffled per process
    /// so a fleet spreads out; see [`Builder::keep_endpoint_order`].
    pub fn endpoints<I: IntoIterator<Item = S>, S: Into<String>>(mut self, endpoints: I) -> Self {
        self.cfg.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// Try endpoints in the given order (tests, a preferred local relay).
    pub fn keep_endpoint_order(mut self) -> Self {
        self.shuffle = false;
        self
    }

    /// The environment's SDK key.
    pub fn sdk_key(mut self, key: impl Into<String>) -> Self {
        self.cfg.credential = crate::Secret::new(key.into());
        self
    }

    /// Directory of the last-known-good cache (created if missing).
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// For `https://` endpoints: trust this PEM CA bundle instead of the
    /// public web roots.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.cfg.tls.ca = Some(pem.into());
        self
    }

    /// For `https://` endpoints: present this client certificate and key
    /// (PEM) for mutual TLS.
    pub fn tls_identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.cfg.tls.identity = Some((cert.into(), key.into()));
        self
    }

    /// Serve flags from a YAML/JSON flag file instead of a relay (the
    /// format `flagctl export` writes).
    pub fn offline_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Serve these flags instead of a relay: for unit tests of your code.
    pub fn test_data(mut self, set: FlagSet) -> Self {
        self.test_data = Some(set);
        self
    }

    setter!(/// Connect timeout per attempt (default 3 s).
        connect_timeout: Duration);
    setter!(/// HTTP/2 keepalive ping interval, also while idle (default 10 s).
        keepalive_interval: Duration);
    setter!(/// HTTP/2 keepalive ping timeout (default 5 s).
        keepalive_timeout: Duration);
    setter!(/// TCP_USER_TIMEOUT of the connection (default 20 s).
        tcp_user_timeout: Duration);
    setter!(/// Time allowed for the first message of a stream (default 10 s).
        first_message_timeout: Duration);
    setter!(/// Heartbeat interval assumed until the relay states its own (default 15 s).
        heartbeat_default: Duration);
    setter!(/// Missed heartbeats before the stream is declared stalled (default 3).
        watchdog_misses: u32);
    setter!(/// First backoff ceiling (default 1 s).
        backoff_base: Duration);
    setter!(/// Largest backoff ceiling (default 30 s).
        backoff_cap: Duration);
    setter!(/// A stream up this long resets the backoff (default 60 s).
        healthy_after: Duration);
    setter!(/// Random delay before resubscribing after a stall (up to; default 2 s).
        stall_jitter: Duration);
    setter!(/// Without a stream for this long, data is reported stale (default 5 s).
        stale_after: Duration);
    /// Validation limits for received data.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.cfg.max_snapshot_bytes = limits.max_snapshot_bytes;
        self.limits = limits;
        self
    }

    /// Builds the client. Returns at once: the cache (if any) is loaded
    /// first, synchronously, then the sync task starts in the background.
    pub fn build(mut self) -> Result<Client, BuildError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        let (status, _) = watch::channel(Status::Initializing { attempts: Vec::new() });
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        if self.cfg.watchdog_misses == 0
            || self.cfg.heartbeat_default.is_zero()
            || self.cfg.first_message_timeout.is_zero()
        {
            return Err(BuildError::Config(
                "watchdog_misses, heartbeat_default and first_message_timeout must be non-zero".into(),
            ));
        }
        let offline = self.file.is_some() || self.test_data.is_some();
        if !offline {
            if self.cfg.endpoints.is_empty() {
                return Err(BuildError::NoEndpoints);
            }
            if self.cfg.credential.is_empty() {
                return Err(BuildError::NoSdkKey);
            }
            if let Some(bad) =
                self.cfg.endpoints.iter().find(|e| !e.starts_with("http://") && !e.starts_with("https://"))
            {
                return Err(BuildError::BadEndpoint(bad.clone()));
            }
            if self.shuffle {
                self.cfg.endpoints.shuffle(&mut rand::rng());
            }
        }
        let cache = if offline { None } else { self.cache_dir.as_ref().and_then(|dir| open_cache(dir)) };
        let (cache_tx, cache_rx) = match &cache {
            Some(_) => {
                let (tx, rx) = watch::channel(None);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            cell: SnapshotCell::new(Snapshot::empty()),
            ready: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            relay_staleness_ms: std::sync::atomic::AtomicU64::new(0),
            confirmed_unix_ms: std::sync::atomic::AtomicU64::new(0),
            status,
            counters: Counters::default(),
            changes,
            cache_tx,
        });

        if let Some(set) = self.test_data.take() {
            let snap = Snapshot::compile(&set, &self.limits)
                .map_err(|e| BuildError::File { path: "test data".into(), source: Box::new(e) })?;
            shared.publish(
                Arc::new(snap),
                Source::Test,
                set.flags.into_iter().map(|f| f.key).collect(),
                None,
            );
            return Ok(Client { shared, _tasks: Arc::new(Tasks::none()) });
        }
        if let Some(path) = &self.file {
            let set = read_flag_file(path)?;
            let snap = Snapshot::compile(&set, &self.limits)
                .map_err(|e| BuildError::File { path: path.display().to_string(), source: Box::new(e) })?;
            shared.publish(
                Arc::new(snap),
                Source::File,
                set.flags.into_iter().map(|f| f.key).collect(),
                None,
            );
            return Ok(Client { shared, _tasks: Arc::new(Tasks::none()) });
        }

        let mut replica = None;
        if let Some(c) = &cache {
            match c.load(sync::key_fingerprint(self.cfg.credential.expose()), &self.limits) {
                Ok(Some((r, snap))) => {
                    tracing::info!(
                        revision = r.revision,
                        flags = snap.len(),
                        "serving the cached flags until the relay confirms them"
                    );
                    // Flags from the cache compile on first use; compile the
                    // rest off the evaluation path so later evaluations
                    // never do (a few tens of ms for 10,000 flags).
                    let warm = snap.clone();
                    runtime.spawn_blocking(move || {
                        let compiled = warm.warm_up();
                        tracing::debug!(compiled, "cached flags compiled");
                    });
                    // Cached data is stale until the stream confirms it.
                    shared.publish(
                        snap,
                        Source::Cache,
                        Vec::new(),
                        Some("serving cached flags; not yet confirmed by a relay"),
                    );
                    replica = Some(r);
                }
                Ok(None) => {}
                Err(e) => {
                    crate::stats::bump(&shared.counters.cache_errors);
                    tracing::warn!(error = %e, "ignoring the flag cache");
                }
            }
        }
        let mut tasks = Tasks::none();
        let sink = Arc::new(sync::ClientSink::new(
            shared.clone(),
            self.limits.clone(),
            self.cfg.stale_after,
            replica,
        ));
        tasks.handles.push(runtime.spawn(crate::follow::run(sink, self.cfg.clone())));
        if let (Some(cache), Some(rx)) = (cache, cache_rx) {
            let fp = sync::key_fingerprint(self.cfg.credential.expose());
            let cache = Arc::new(cache);
            let writer = sync::cache_writer(
                shared.clone(),
                Arc::downgrade(&cache),
                rx.clone(),
                self.cache_interval,
                fp,
            );
            tasks.handles.push(runtime.spawn(writer));
            tasks.cache = Some(FinalWrite { shared: shared.clone(), cache, latest: rx, key_fingerprint: fp });
        }
        Ok(Client { shared, _tasks: Arc::new(tasks) })
    }
}

fn open_cache(dir: &std::path::Path) -> Option<Cache> {
    match Cache::open(dir) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "running without a flag cache");
            None
        }
    }
}

/// Reads a YAML or JSON flag file (`flagctl export` format).
pub fn read_flag_file(path: &std::path::Path) -> Result<FlagSet, BuildError> {
    let err = |e: Box<dyn std::error::Error + Send + Sync>| BuildError::File {
        path: path.display().to_string(),
        source: e,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(Box::new(e)))?;
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| err(Box::new(e)))
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| err(Box::new(e)))
    }
}

/// An evaluation result that owns its data (see [`Client::detail`]).
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluationDetail<T> {
    /// The value (the caller's default on error).
    pub value: T,
    /// The served variation; `None` when the default was returned.
    pub variation: Option<u32>,
    /// Reason kind: `OFF`, `TARGET_MATCH`, `RULE_MATCH`, `FALLTHROUGH`,
    /// `PREREQUISITE_FAILED` or `ERROR`.
    pub reason: &'static str,
    /// For `RULE_MATCH`: the rule index.
    pub rule_index: Option<u32>,
    /// For `RULE_MATCH`: the rule id (if it has one).
    pub rule_id: Option<String>,
    /// For `PREREQUISITE_FAILED`: the prerequisite.
    pub prerequisite_key: Option<String>,
    /// For `ERROR`: what went wrong.
    pub error: Option<ErrorKind>,
    /// The flag's version.
    pub flag_version: u64,
    /// The snapshot revision.
    pub revision: u64,
    /// Whether the data was stale.
    pub stale: bool,
    /// Whether a percentage rollout or a schedule chose the variation: for
    /// `FALLTHROUGH` either; for `RULE_MATCH` only a schedule (the reason
    /// does not say whether a rule's rollout chose).
    pub in_rollout: bool,
    /// For a schedule: its current step, 1-based (0 before the first step).
    pub schedule_step: Option<u32>,
}

impl Client {
    /// A builder with production defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Evaluates a flag as `T`; counts fallbacks. The closure sees the
    /// borrowed result (no allocation) while the snapshot is held.
    #[inline]
    pub fn with_detail<'a, T, R>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        f: impl FnOnce(Detail<'_, T>) -> R,
    ) -> R
    where
        T: for<'s> FromValue<'s> + 'a,
    {
        // `ready` first: publish stores the cell before setting it, so a
        // reader that sees it set also sees the published snapshot.
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            return f(Detail {
                value: default,
                variation: None,
                reason: Reason::Error(ErrorKind::NotReady),
                flag_version: 0,
                revision: 0,
                stale: false,
            });
        }
        let snap = self.shared.cell.load();
        let mut d = snap.detail(key, ctx, default);
        if let Reason::Error(kind) = d.reason {
            self.shared.counters.fallback(kind);
        }
        d.stale = self.shared.stale.load(Ordering::Relaxed);
        f(d)
    }

    /// A bool flag's value, or `default`. No I/O, no lock, no allocation.
    #[inline]
    pub fn bool(&self, key: &str, ctx: &Context<'_>, default: bool) -> bool {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// An int flag's value, or `default`.
    #[inline]
    pub fn int(&self, key: &str, ctx: &Context<'_>, default: i64) -> i64 {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// A float (or int) flag's value, or `default`.
    #[inline]
    pub fn float(&self, key: &str, ctx: &Context<'_>, default: f64) -> f64 {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// A string flag's value, or `default`. Copies the string; use
    /// [`Client::string_with`] to borrow it without allocating.
    pub fn string(&self, key: &str, ctx: &Context<'_>, default: &str) -> String {
        self.string_with(key, ctx, default, str::to_owned)
    }

    /// A string flag's value, borrowed for the duration of `f`.
    pub fn string_with<R>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: &str,
        f: impl FnOnce(&str) -> R,
    ) -> R {
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            return f(default);
        }
        let snap = self.shared.cell.load();
        let d = snap.detail(key, ctx, default);
        if let Reason::Error(kind) = d.reason {
            self.shared.counters.fallback(kind);
        }
        f(d.value)
    }

    /// Any flag's value as JSON, or `default`.
    pub fn json(&self, key: &str, ctx: &Context<'_>, default: Json) -> Json {
        self.json_detail(key, ctx, default).value
    }

    /// Typed evaluation with an owned result (allocates for rule ids and
    /// prerequisite keys).
    pub fn detail<T: for<'s> FromValue<'s>>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> EvaluationDetail<T> {
        self.with_detail(key, ctx, default, owned)
    }

    /// [`Client::bool`] with the full result.
    pub fn bool_detail(&self, key: &str, ctx: &Context<'_>, default: bool) -> EvaluationDetail<bool> {
        self.detail(key, ctx, default)
    }

    /// [`Client::int`] with the full result.
    pub fn int_detail(&self, key: &str, ctx: &Context<'_>, default: i64) -> EvaluationDetail<i64> {
        self.detail(key, ctx, default)
    }

    /// [`Client::float`] with the full result.
    pub fn float_detail(&self, key: &str, ctx: &Context<'_>, default: f64) -> EvaluationDetail<f64> {
        self.detail(key, ctx, default)
    }

    /// [`Client::string`] with the full result.
    pub fn string_detail(&self, key: &str, ctx: &Context<'_>, default: &str) -> EvaluationDetail<String> {
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            return not_ready(default.to_owned());
        }
        let snap = self.shared.cell.load();
        let mut d = snap.detail(key, ctx, default);
        if let Reason::Error(kind) = d.reason {
            self.shared.counters.fallback(kind);
        }
        d.stale = self.shared.stale.load(Ordering::Relaxed);
        owned_map(d, str::to_owned)
    }

    /// [`Client::json`] with the full result.
    pub fn json_detail(&self, key: &str, ctx: &Context<'_>, default: Json) -> EvaluationDetail<Json> {
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            return not_ready(default);
        }
        let snap = self.shared.cell.load();
        let mut d = snap.detail(key, ctx, Cow::Owned(default));
        if let Reason::Error(kind) = d.reason {
            self.shared.counters.fallback(kind);
        }
        d.stale = self.shared.stale.load(Ordering::Relaxed);
        owned_map(d, Cow::into_owned)
    }

    /// The current snapshot, for many evaluations against one revision.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.cell.load_full()
    }

    /// A bool flag's value through a pre-resolved [`FlagHandle`], or
    /// `default`; counts fallbacks like [`Client::bool`]. The handle skips
    /// the key lookup, and for a flag whose answer does not depend on the
    /// context (off, or a fixed fallthrough) even the snapshot load. For a
    /// typed result use [`FlagHandle::detail`] on [`Client::snapshot`].
    #[inline]
    pub fn handle_bool(&self, handle: &FlagHandle, ctx: &Context<'_>, default: bool) -> bool {
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            return default;
        }
        let (value, error) = handle.bool_checked(&self.shared.cell, ctx, default);
        if let Some(kind) = error {
            self.shared.counters.fallback(kind);
        }
        value
    }

    /// Current status.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// A receiver that sees every status change.
    pub fn status_watch(&self) -> watch::Receiver<Status> {
        self.shared.status.subscribe()
    }

    /// Waits until data is served (from the stream, cache or a file), up to
    /// `timeout`; returns the status either way.
    pub async fn wait_ready(&self, timeout: Duration) -> Status {
        let mut rx = self.status_watch();
        // A timeout just returns the status as it is.
        let waited = tokio::time::timeout(timeout, rx.wait_for(Status::has_data)).await;
        if waited.is_err() {
            tracing::debug!(?timeout, "wait_ready timed out");
        }
        self.status()
    }

    /// How old the served data may be: the time since a relay last
    /// confirmed it current, plus how old that relay said its own data was
    /// then (a replica relay cut off from its upstream reports its age in
    /// every heartbeat, PROTOCOL.md §2.6). `None` until a relay confirmed
    /// anything (data from the cache, a file or test data).
    pub fn data_age(&self) -> Option<Duration> {
        let confirmed = self.shared.confirmed_unix_ms.load(Ordering::Relaxed);
        if confirmed == 0 {
            return None;
        }
        let relay = self.shared.relay_staleness_ms.load(Ordering::Relaxed);
        Some(Duration::from_millis(now_ms().saturating_sub(confirmed) + relay))
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.shared.counters.snapshot()
    }

    /// A stream of applied revisions with the flag keys they changed.
    /// Bounded: a listener that falls more than 64 revisions behind gets
    /// `Lagged` and should re-read what it needs.
    pub fn changes(&self) -> broadcast::Receiver<Change> {
        self.shared.changes.subscribe()
    }

    /// Watches one flag's value for one context: the receiver holds the
    /// current value and changes whenever an applied revision changes it.
    pub fn watch_flag(&self, key: &str, ctx: Context<'static>) -> watch::Receiver<Json> {
        let current = self.json(key, &ctx, Json::Null);
        let (tx, rx) = watch::channel(current);
        let mut changes = self.changes();
        let client = self.clone();
        let key = key.to_owned();
        tokio::spawn(async move {
            loop {
                // Any change may move this flag (its segments and
                // prerequisites change too); re-evaluate and compare.
                let change = tokio::select! {
                    _ = tx.closed() => return,
                    c = changes.recv() => c,
                };
                match change {
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        let v = client.json(&key, &ctx, Json::Null);
                        tx.send_if_modified(|old| {
                            if *old == v {
                                false
                            } else {
                                *old = v;
                                true
                            }
                        });
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        rx
    }
}

fn not_ready<T>(value: T) -> EvaluationDetail<T> {
    EvaluationDetail {
        value,
        variation: None,
        reason: "ERROR",
        rule_index: None,
        rule_id: None,
        prerequisite_key: None,
        error: Some(ErrorKind::NotReady),
        flag_version: 0,
        revision: 0,
        stale: false,
        in_rollout: false,
        schedule_step: None,
    }
}

fn owned<T>(d: Detail<'_, T>) -> EvaluationDetail<T> {
    owned_map(d, |v| v)
}

fn owned_map<S, T>(d: Detail<'_, S>, f: impl FnOnce(S) -> T) -> EvaluationDetail<T> {
    let (rule_index, rule_id, prerequisite_key, error, in_rollout, schedule_step) = match d.reason {
        Reason::RuleMatch { index, id, step } => {
            (Some(index), (!id.is_empty()).then(|| id.to_owned()), None, None, step.is_some(), step)
        }
        Reason::PrerequisiteFailed { key } => (None, None, Some(key.to_owned()), None, false, None),
        Reason::Error(e) => (None, None, None, Some(e), false, None),
        Reason::Fallthrough { rollout, step } => (None, None, None, None, rollout, step),
        _ => (None, None, None, None, false, None),
    };
    EvaluationDetail {
        value: f(d.value),
        variation: d.variation,
        reason: d.reason.kind_name(),
        rule_index,
        rule_id,
        prerequisite_key,
        error,
        flag_version: d.flag_version,
        revision: d.revision,
        stale: d.stale,
        in_rollout,
        schedule_step,
    }
}
