//! The relay's flag store: environments, flags, segments, the change log
//! and the audit log, held in memory as one immutable [`EnvState`] per
//! environment behind an `ArcSwap`, and made durable by a [`Backend`]
//! (the embedded sled database by default).
//!
//! A revision reaches memory only after the backend made it durable;
//! subscribers read memory only. Revisions come from admin writes
//! (`write.rs`: planned here, committed by the backend) or, on a replica,
//! from the upstream relay (`received.rs`: verified, persisted, passed on
//! unchanged). This module knows nothing of gRPC: `error.rs` maps
//! [`StoreError`] to a status.
//!
//! May use `ops` (metrics, limits, secrets, process facts) and the SDK's
//! core; nothing else of the relay (the streams read its state, the
//! cluster feeds it, the Admin API writes through it).

pub(crate) mod audit;
pub(crate) mod backend;
mod budget;
mod build;
mod bulk;
mod chain;
pub(crate) mod encoded;
mod environment;
mod error;
mod freshness;
mod index;
pub(crate) use index::KeyMatch;
mod key;
mod mark;
pub(crate) mod meta;
mod op;
mod origin;
pub(crate) mod postgres;
pub(crate) mod received;
pub(crate) mod sled;
pub(crate) mod state;
mod task;
#[cfg(test)]
mod tests;
pub(crate) mod token;
pub(crate) mod waiter;
mod write;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use flagstream::Limits;
use tokio::sync::{Mutex, watch};

use crate::ops::limit::SizeQuota;
use crate::ops::metrics::Metrics;
pub(crate) use audit::{Access, Who};
pub(crate) use backend::Backend;
use build::{DecodedItems, build_items, decode_item};
pub(crate) use error::{StoreError, corrupt, to_json};
pub(crate) use freshness::Freshness;
pub(crate) use meta::{EnvMeta, SdkKeyRecord};
pub(crate) use op::{Op, WriteResult};
use state::{EnvState, Log};

/// One environment: its current state and the means to change it.
#[derive(Debug)]
pub(crate) struct Env {
    /// The current state; replaced whole on every commit.
    pub state: ArcSwap<EnvState>,
    /// Head revision, for tasks to wait on (`u64::MAX`: deleted).
    pub head: watch::Sender<u64>,
    /// The subscribers' streams waiting on the head: woken on every
    /// publish and on deletion, registered once per stream.
    pub waiters: waiter::Waiters,
    /// Serialises writers of this environment (one writer at a time keeps
    /// revisions gapless and versions consistent): admin writes, received
    /// revisions, a shared database's feed.
    pub(crate) write: Mutex<()>,
    /// Persistent metadata (epoch, keys, ...).
    pub meta: ArcSwap<EnvMeta>,
    /// Set when a commit failed after reaching storage: the outcome on
    /// disk is unknown, so no further write may build on memory.
    pub poisoned: AtomicBool,
    /// Set (under the write lock) when the environment is deleted: a write
    /// that was waiting for the lock must not resurrect it on disk.
    pub deleted: AtomicBool,
    /// Set while a commit is between reaching storage and publishing: a
    /// panic then leaves disk unknown (poison); a panic before it does not.
    pub committing: AtomicBool,
    /// On a replica: how current the data is.
    pub freshness: Freshness,
}

impl Env {
    /// A new environment handle at `state`.
    pub(crate) fn new(state: EnvState, meta: EnvMeta) -> Env {
        Env {
            head: watch::channel(state.revision).0,
            waiters: waiter::Waiters::default(),
            state: ArcSwap::from_pointee(state),
            write: Mutex::new(()),
            meta: ArcSwap::from_pointee(meta),
            poisoned: AtomicBool::new(false),
            deleted: AtomicBool::new(false),
            committing: AtomicBool::new(false),
            freshness: Freshness::default(),
        }
    }

    /// Whether the environment holds data: always on a primary; on a
    /// replica once a first snapshot arrived (before that its epoch is
    /// empty and subscribers are sent elsewhere).
    pub(crate) fn has_data(&self) -> bool {
        !self.state.load().epoch.is_empty()
    }

    /// After taking the write lock: refuses if the environment was deleted
    /// meanwhile or a storage failure poisoned it.
    fn check_writable(&self) -> Result<(), StoreError> {
        let name = || self.meta.load().name.clone();
        if self.deleted.load(Ordering::Acquire) {
            return Err(StoreError::EnvNotFound(name()));
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(StoreError::Poisoned(name()));
        }
        Ok(())
    }
}

/// Retention of the in-memory and on-disk change log.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retention {
    /// Most revisions kept.
    pub revisions: usize,
    /// Most bytes of changed items the kept revisions may account for.
    pub bytes: usize,
    /// Audit records are kept for this many most recent revisions.
    pub audit_revisions: usize,
}

impl Retention {
    /// Highest revision whose audit records go once `head` is committed.
    pub(crate) fn audit_floor(&self, head: u64) -> Option<u64> {
        head.checked_sub(self.audit_revisions as u64).filter(|f| *f > 0)
    }
}

/// Brings an environment of a shared database to the database's head now
/// (implemented by the change feed).
#[async_trait::async_trait]
pub(crate) trait CatchUp: Send + Sync + std::fmt::Debug {
    /// Catches `env` up; the caller holds its write lock, and with
    /// `row_locked` also the environment's row in the database. Failures
    /// are the implementation's to report.
    async fn catch_up_locked(&self, env: &Arc<Env>, row_locked: bool) -> CatchUpOutcome;
}

/// Told when an environment leaves this relay's memory (deleted here, at
/// the upstream, or by another relay of a shared database), so what is
/// kept about it elsewhere (its usage) goes with it.
pub(crate) trait EnvGone: Send + Sync + std::fmt::Debug {
    /// Environment `name` is gone.
    fn env_gone(&self, name: &str);
}

/// What [`CatchUp::catch_up_locked`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatchUpOutcome {
    /// Caught up as far as it could (or failed and reported it).
    Done,
    /// History was lost and the environment needs a new epoch, which
    /// writes the row: call again without holding it.
    NeedsRowUnlocked,
}

/// Where a relay's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// This relay is the primary: admin writes make the revisions.
    Primary,
    /// This relay follows an upstream relay and accepts no changes.
    Replica {
        /// The upstream URLs, comma-separated, for messages.
        upstream: String,
    },
    /// Every relay of the deployment writes to one shared database and
    /// follows its change feed (PostgreSQL).
    Shared,
}

/// Cloneable handle to the store.
#[derive(Clone, Debug)]
pub(crate) struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    backend: Arc<dyn Backend>,
    envs: ArcSwap<HashMap<String, Arc<Env>>>,
    /// Serialises environment creation and deletion.
    envs_lock: Mutex<()>,
    limits: Limits,
    retention: Retention,
    metrics: Metrics,
    /// Per-environment size quotas (replaced on a configuration reload).
    size_quota: ArcSwap<SizeQuota>,
    /// Bytes the memory budget has set aside for writes being applied now
    /// (`write.rs` `Reserved`), so concurrent writes cannot pass it together.
    budget_reserved: std::sync::atomic::AtomicU64,
    source: Source,
    /// The primary's address as the upstream announced it (replicas).
    primary: ArcSwap<Option<String>>,
    /// Bumped on every change to the set of environments or their keys
    /// (what replicas follow as the catalog).
    catalog: watch::Sender<u64>,
    /// SDK keys by secret hash, rebuilt when `catalog` moves.
    key_index: index::KeyIndex,
    /// Asks a shared database's change feed to catch up now (a write found
    /// the head moved, or a subscriber's cursor is ahead).
    feed_kick: tokio::sync::Notify,
    /// Brings an environment to a shared database's head on demand (a
    /// write found it behind): the change feed, once it runs.
    catch_up: std::sync::Mutex<Option<Arc<dyn CatchUp>>>,
    /// Told when an environment is gone.
    env_gone: std::sync::Mutex<Option<Arc<dyn EnvGone>>>,
    /// The operations running on tasks of their own ([`Store::detached`]):
    /// shutdown waits for them before its last flush.
    tasks: tokio_util::task::TaskTracker,
}

/// The environment a deleted environment's archived audit chain belongs
/// to: archives are named `NAME.deleted.UNIX_MS` (no environment name
/// holds a `.`).
pub(crate) fn archived_env(name: &str) -> Option<&str> {
    name.split_once(".deleted.").map(|(env, _)| env)
}

/// Unix time in ms.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Store {
    /// Opens the store over `backend` and loads every environment into
    /// memory, verifying each one's checksum.
    pub(crate) async fn open(
        backend: Arc<dyn Backend>,
        limits: Limits,
        retention: Retention,
        metrics: Metrics,
        source: Source,
    ) -> Result<Store, StoreError> {
        let loaded = backend.load(retention).await?;
        let (limits2, metrics2) = (limits.clone(), metrics.clone());
        let envs = tokio::task::spawn_blocking(move || {
            loaded
                .into_iter()
                .map(|l| {
                    let env = load_env(l, &limits2, &metrics2)?;
                    Ok((env.meta.load().name.clone(), Arc::new(env)))
                })
                .collect::<Result<HashMap<_, _>, StoreError>>()
        })
        .await
        .map_err(StoreError::Task)??;
        let store = Store {
            inner: Arc::new(Inner {
                backend,
                envs: ArcSwap::from_pointee(envs),
                envs_lock: Mutex::new(()),
                limits,
                retention,
                metrics,
                size_quota: ArcSwap::from_pointee(crate::ops::limit::QuotaConfig::default().sizes()),
                budget_reserved: std::sync::atomic::AtomicU64::new(0),
                source,
                primary: ArcSwap::from_pointee(None),
                catalog: watch::channel(0).0,
                key_index: index::KeyIndex::default(),
                feed_kick: tokio::sync::Notify::new(),
                catch_up: std::sync::Mutex::new(None),
                env_gone: std::sync::Mutex::new(None),
                tasks: tokio_util::task::TaskTracker::new(),
            }),
        };
        store.update_gauges();
        Ok(store)
    }

    /// The backend (tokens and settings live there too).
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.inner.backend
    }

    /// Where this relay's data comes from.
    pub(crate) fn source(&self) -> &Source {
        &self.inner.source
    }

    /// `Err(ReadOnly)` on a replica: changes are made at the primary.
    pub(crate) fn check_writable(&self) -> Result<(), StoreError> {
        match &self.inner.source {
            Source::Primary | Source::Shared => Ok(()),
            Source::Replica { upstream } => Err(StoreError::ReadOnly {
                upstream: upstream.clone(),
                primary: (**self.inner.primary.load()).clone(),
            }),
        }
    }

    /// Records the primary's address as announced by the upstream.
    pub(crate) fn set_primary(&self, primary: Option<String>) {
        self.inner.primary.store(Arc::new(primary));
    }

    /// The primary's address: this relay's own when it is the primary
    /// (`advertised`), else what the upstream announced.
    pub(crate) fn primary(&self) -> Option<String> {
        (**self.inner.primary.load()).clone()
    }

    /// How stale `env`'s data is, ms: 0 on a primary; on a replica what
    /// [`Freshness::staleness_ms`] says; a copy never confirmed counts from
    /// its head's commit time.
    pub(crate) fn staleness_ms(&self, env: &Env) -> u64 {
        match self.inner.source {
            Source::Primary => 0,
            // A replica: since its upstream confirmed the data; a relay of
            // a shared database: since its change feed last heard from it.
            Source::Replica { .. } | Source::Shared => {
                let now = now_ms();
                env.freshness
                    .staleness_ms(now)
                    .unwrap_or_else(|| now.saturating_sub(env.state.load().committed_unix_ms))
            }
        }
    }

    /// Persists each environment's last confirmation (a replica, at
    /// shutdown), so a restart knows how old its data is.
    pub(crate) async fn persist_freshness(&self) -> Result<(), StoreError> {
        if self.inner.source == Source::Primary {
            return Ok(());
        }
        for env in self.envs() {
            let confirmed = env.freshness.confirmed_unix_ms();
            let name = env.meta.load().name.clone();
            if confirmed > env.meta.load().confirmed_unix_ms {
                self.change_meta(&name, move |m| {
                    m.confirmed_unix_ms = confirmed;
                    Ok(())
                })
                .await?;
            }
        }
        Ok(())
    }

    /// A receiver that changes whenever environments or their keys change.
    pub(crate) fn catalog_changes(&self) -> watch::Receiver<u64> {
        self.inner.catalog.subscribe()
    }

    /// Tells catalog followers that something changed.
    pub(crate) fn catalog_changed(&self) {
        self.inner.catalog.send_modify(|v| *v += 1);
    }

    /// Sets the per-environment size quotas (at start and on reload).
    pub(crate) fn set_size_quota(&self, q: SizeQuota) {
        self.inner.size_quota.store(Arc::new(q));
    }

    /// The validation limits in force.
    pub(crate) fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// The change-log and audit retention.
    pub(crate) fn retention(&self) -> Retention {
        self.inner.retention
    }

    /// Metrics handle.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// An environment by name.
    pub(crate) fn env(&self, name: &str) -> Result<Arc<Env>, StoreError> {
        self.inner.envs.load().get(name).cloned().ok_or_else(|| StoreError::EnvNotFound(name.to_owned()))
    }

    /// The environment, and the id of its SDK key, whose secret hashes to
    /// `hash`, if that key works now: one map lookup (`store/index.rs`).
    pub(crate) fn env_by_key_hash(&self, hash: &str) -> Option<KeyMatch> {
        let version = *self.inner.catalog.borrow();
        self.inner.key_index.find(hash, now_ms(), version, &self.inner.envs.load())
    }

    /// All environments, sorted by name.
    pub(crate) fn envs(&self) -> Vec<Arc<Env>> {
        let mut v: Vec<_> = self.inner.envs.load().values().cloned().collect();
        v.sort_by(|a, b| a.meta.load().name.cmp(&b.meta.load().name));
        v
    }

    fn update_gauges(&self) {
        for env in self.inner.envs.load().values() {
            self.update_env_gauges(env);
        }
    }

    fn update_env_gauges(&self, env: &Env) {
        let m = &self.inner.metrics;
        let s = env.state.load();
        let labels = vec![("env", s.name.clone())];
        m.store_items.get_or_create(&labels).set(s.items.len() as i64);
        m.store_bytes.get_or_create(&labels).set(s.item_bytes() as i64);
        m.head_revision.get_or_create(&labels).set(s.revision as i64);
    }

    /// Stops all writes to `env` after a failure that may have left disk
    /// and memory apart; loud, counted.
    fn poison(&self, env: &Env, name: &str, error: &dyn std::fmt::Display) {
        if self.inner.backend.shared() {
            // Memory follows the shared database's feed, which shows what it
            // holds whatever happened to this write: nothing to fence off.
            tracing::error!(env = %name, error = %error, "a write to the database failed; nothing was published here (the change feed brings whatever the database holds)");
            self.inner.metrics.limit_hit("storage_failure");
            return;
        }
        env.poisoned.store(true, Ordering::Release);
        tracing::error!(env = %name, error = %error, "commit failed; this environment refuses writes until the relay restarts");
        self.inner.metrics.limit_hit("storage_failure");
    }

    /// Makes everything durable (shutdown).
    pub(crate) async fn flush(&self) -> Result<(), StoreError> {
        self.inner.backend.flush().await
    }

    /// Sets what catches an environment up on demand (the change feed).
    /// Who is told when an environment is gone.
    pub(crate) fn set_env_gone(&self, g: Arc<dyn EnvGone>) {
        *self.inner.env_gone.lock().unwrap_or_else(|p| p.into_inner()) = Some(g);
    }

    /// Tells who asked that environment `name` is gone.
    pub(crate) fn tell_env_gone(&self, name: &str) {
        let g = self.inner.env_gone.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(g) = g {
            g.env_gone(name);
        }
    }

    pub(crate) fn set_catch_up(&self, c: Arc<dyn CatchUp>) {
        *self.inner.catch_up.lock().unwrap_or_else(|p| p.into_inner()) = Some(c);
    }

    /// Catches `env` up now (its write lock held), if a change feed runs.
    pub(crate) async fn catch_up_locked(&self, env: &Arc<Env>, row_locked: bool) -> CatchUpOutcome {
        let c = self.inner.catch_up.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match c {
            Some(c) => c.catch_up_locked(env, row_locked).await,
            None => CatchUpOutcome::Done,
        }
    }

    /// Asks the change feed to catch everything up soon.
    pub(crate) fn kick_feed(&self) {
        self.inner.feed_kick.notify_one();
    }

    /// Resolves when a write asks the change feed to catch up now.
    pub(crate) async fn feed_kicked(&self) {
        self.inner.feed_kick.notified().await;
    }

    /// A subscriber's cursor is ahead of `env`'s head (same epoch): in a
    /// shared database the feed is asked to catch up (another relay may
    /// have committed past this one's head). The cursor is the client's
    /// claim, never evidence: it is held (PROTOCOL.md §2.2), and only the
    /// relay's own evidence (feed.rs) can start a new epoch, so a client
    /// cannot make the relays rewrite shared state.
    pub(crate) fn note_cursor_ahead(&self) {
        if self.inner.source == Source::Shared {
            self.inner.feed_kick.notify_one();
        }
    }

    /// Adds an environment another writer of the shared database created
    /// (memory only; it is already stored).
    pub(crate) async fn register_env(&self, loaded: backend::Loaded) -> Result<Arc<Env>, StoreError> {
        let (limits, metrics) = (self.inner.limits.clone(), self.inner.metrics.clone());
        let env = Arc::new(blocking(move || load_env(loaded, &limits, &metrics)).await?);
        let _guard = self.inner.envs_lock.lock().await;
        let name = env.meta.load().name.clone();
        let mut all = HashMap::clone(&self.inner.envs.load());
        if let Some(existing) = all.get(&name) {
            return Ok(existing.clone());
        }
        all.insert(name, env.clone());
        self.inner.envs.store(Arc::new(all));
        self.update_env_gauges(&env);
        self.catalog_changed();
        Ok(env)
    }

    /// Sets `env`'s audit chain head (a shared database's, read with the
    /// head it belongs to).
    pub(crate) fn set_audit_head(&self, env: &Env, head: &str) {
        let current = env.meta.load();
        if current.audit_head != head {
            let mut next = EnvMeta::clone(&current);
            next.audit_head = head.to_owned();
            env.meta.store(Arc::new(next));
        }
    }

    /// Replaces the metadata of `env` with what another writer of the
    /// shared database stored (its keys, description, CORS origins); returns the ids of
    /// keys that are gone (their streams must end).
    pub(crate) fn replace_meta(&self, env: &Env, stored: EnvMeta) -> Vec<String> {
        let current = env.meta.load_full();
        let mut next = EnvMeta::clone(&current);
        next.description = stored.description;
        next.sdk_keys = stored.sdk_keys;
        next.keys_made = stored.keys_made;
        next.cors_origins = stored.cors_origins;
        if next == *current {
            return Vec::new();
        }
        let gone = current
            .sdk_keys
            .iter()
            .filter(|k| !next.sdk_keys.iter().any(|n| n.id == k.id))
            .map(|k| k.id.clone())
            .collect();
        env.meta.store(Arc::new(next));
        self.catalog_changed();
        gone
    }
}

/// Builds one environment's in-memory state from what the backend loaded,
/// verifying the checksum the metadata seals.
fn load_env(l: backend::Loaded, limits: &Limits, metrics: &Metrics) -> Result<Env, StoreError> {
    let meta = l.meta;
    let name = meta.name.clone();
    if l.audit_trimmed > 0 {
        tracing::info!(env = %name, records = l.audit_trimmed, "audit records past the retention dropped");
        metrics.audit_trimmed.inc_by(l.audit_trimmed as u64);
    }
    let (items, snapshot) =
        build_items(&name, l.items.into_iter().map(|((k, _), b)| (k, b)), limits, metrics)
            .map_err(|e| corrupt(format!("an item of environment {name:?}"), std::io::Error::other(e)))?;
    let state = EnvState::new(
        name.clone(),
        meta.epoch.clone(),
        meta.revision,
        meta.committed_unix_ms,
        items,
        l.log,
        Arc::new(snapshot.with_cursor(&meta.epoch, meta.revision)),
    );
    if state.checksum() != meta.checksum {
        return Err(StoreError::Corrupt {
            what: format!("environment {name:?}"),
            source: format!(
                "checksum of stored items {:#018x} does not match the committed {:#018x}",
                state.checksum(),
                meta.checksum
            )
            .into(),
        });
    }
    tracing::info!(env = %name, revision = meta.revision, items = state.items.len(), "environment loaded");
    let env = Env::new(state, meta);
    // A replica's copy is as old as its last confirmation (0 on a primary).
    let confirmed = env.meta.load().confirmed_unix_ms;
    if confirmed > 0 {
        env.freshness.confirm(confirmed, 0);
    }
    Ok(env)
}

/// Runs `work` on tokio's blocking pool (validation, compilation).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work).await.map_err(StoreError::Task)?
}

/// Drops the oldest entries beyond the retention; returns their revisions.
fn trim_log(log: &mut Log, retention: Retention) -> Vec<u64> {
    let mut trimmed = Vec::new();
    let mut bytes: usize = log.iter().map(|e| e.bytes).sum();
    while log.len() > 1 && (log.len() > retention.revisions || bytes > retention.bytes) {
        if let Some(e) = log.pop_front() {
            bytes -= e.bytes;
            trimmed.push(e.revision);
        }
    }
    trimmed
}
