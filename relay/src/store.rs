//! The authoritative flag store: environments, flags, segments, the change
//! log and the audit log in sled, mirrored in memory as one immutable
//! [`EnvState`] per environment behind an `ArcSwap`.
//!
//! Every admin write is one sled transaction across the environment's trees,
//! flushed to disk before the caller hears "ok"; only then is the new state
//! published to subscribers. Subscribers read memory only. This module knows
//! nothing of gRPC: `error.rs` maps [`StoreError`] to a status.

pub mod audit;
mod key;
mod op;
mod persist;
pub mod state;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwap;
use flagstream::{Limits, Snapshot, ValidationErrors};
use tokio::sync::{Mutex, watch};

use crate::auth;
use crate::metrics::Metrics;
use crate::quota::SizeQuota;
pub use audit::{AuditPos, AuditRecord, Verification, Who};
pub use op::{Op, WriteResult};
pub use persist::{EnvMeta, SdkKeyRecord};
use state::{EnvState, Item, ItemKey, Kind, LogEntry};

/// Store errors. Each names what was wrong and where.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No such environment.
    #[error("environment {0:?} not found")]
    EnvNotFound(String),
    /// No such SDK key (or it expired).
    #[error("SDK key {id:?} not found in environment {env:?}")]
    KeyNotFound {
        /// Environment.
        env: String,
        /// Key id.
        id: String,
    },
    /// The environment name is taken.
    #[error("environment {0:?} already exists")]
    EnvExists(String),
    /// No such flag or segment.
    #[error("{} {key:?} not found in environment {env:?}", kind.name())]
    ItemNotFound {
        /// Environment.
        env: String,
        /// Item kind.
        kind: Kind,
        /// Item key.
        key: String,
    },
    /// Optimistic concurrency: the item changed since the caller read it.
    #[error("{} {key:?}: expected version {expected}, but it is at version {current}{}", kind.name(), changed_by.as_ref().map(|c| format!(" (last changed by {c})")).unwrap_or_default())]
    Conflict {
        /// Item kind.
        kind: Kind,
        /// Item key.
        key: String,
        /// What the caller expected (0 = must not exist).
        expected: u64,
        /// What it is (0 = does not exist).
        current: u64,
        /// Who made the current version and when, from the audit log.
        changed_by: Option<String>,
    },
    /// The environment moved past the revision a batch expected.
    #[error("environment {env:?} is at revision {current}, the request expected {expected}")]
    RevisionConflict {
        /// Environment.
        env: String,
        /// Expected revision.
        expected: u64,
        /// Actual revision.
        current: u64,
    },
    /// The write would leave invalid data.
    #[error(transparent)]
    Invalid(#[from] ValidationErrors),
    /// sled failed.
    #[error("storage error")]
    Storage(#[from] sled::Error),
    /// An earlier storage failure left memory and disk possibly apart;
    /// writes stop until a restart reloads the truth from disk.
    #[error("environment {0:?} refuses writes after a storage failure; restart the relay to reload it")]
    Poisoned(String),
    /// The write would take the environment past a size quota.
    #[error(
        "environment {env:?}: the write would make {used} {what}, quota {limit} ({setting}); nothing was written"
    )]
    Quota {
        /// Environment.
        env: String,
        /// What is counted (`flags`, `segments`, `bytes of flags and segments`).
        what: &'static str,
        /// The quota's metric label.
        quota: &'static str,
        /// The relay option that sets it.
        setting: &'static str,
        /// What the write would make.
        used: usize,
        /// The quota.
        limit: usize,
    },
    /// The caller went away while the write waited for its turn; it was
    /// not started.
    #[error("the caller went away before the write started; nothing was written")]
    Abandoned,
    /// A write's task failed (panicked, or the runtime is shutting down).
    #[error("the write's task failed")]
    Task(#[source] tokio::task::JoinError),
    /// Stored data did not decode.
    #[error("stored {what} is corrupt")]
    Corrupt {
        /// Which record.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// One environment: its current state and the means to change it.
#[derive(Debug)]
pub struct Env {
    /// The current state; replaced whole on every commit.
    pub state: ArcSwap<EnvState>,
    /// Head revision, for subscribers to wait on.
    pub head: watch::Sender<u64>,
    /// Serialises writers of this environment (one writer at a time keeps
    /// revisions gapless and versions consistent).
    write: Mutex<()>,
    /// Persistent metadata (epoch, key hash, ...).
    pub meta: arc_swap::ArcSwap<EnvMeta>,
    /// Set when a commit failed after reaching sled: the outcome on disk
    /// is unknown, so no further write may build on memory.
    pub poisoned: std::sync::atomic::AtomicBool,
    /// Set (under the write lock) when the environment is deleted: a write
    /// that was waiting for the lock must not resurrect it on disk.
    pub deleted: std::sync::atomic::AtomicBool,
    /// Set while a commit is between reaching sled and publishing: a panic
    /// then leaves disk unknown (poison); a panic before it does not.
    pub committing: std::sync::atomic::AtomicBool,
}

impl Env {
    /// A new environment handle at `state`.
    pub(crate) fn new(state: EnvState, meta: EnvMeta) -> Env {
        Env {
            head: watch::channel(state.revision).0,
            state: ArcSwap::from_pointee(state),
            write: Mutex::new(()),
            meta: ArcSwap::from_pointee(meta),
            poisoned: std::sync::atomic::AtomicBool::new(false),
            deleted: std::sync::atomic::AtomicBool::new(false),
            committing: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// After taking the write lock: refuses if the environment was deleted
    /// meanwhile or a storage failure poisoned it.
    fn check_writable(&self) -> Result<(), StoreError> {
        let name = || self.meta.load().name.clone();
        if self.deleted.load(std::sync::atomic::Ordering::Acquire) {
            return Err(StoreError::EnvNotFound(name()));
        }
        if self.poisoned.load(std::sync::atomic::Ordering::Acquire) {
            return Err(StoreError::Poisoned(name()));
        }
        Ok(())
    }
}

/// Retention of the in-memory and on-disk change log.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
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

/// Cloneable handle to the store.
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: sled::Db,
    meta: sled::Tree,
    envs: ArcSwap<HashMap<String, Arc<Env>>>,
    /// Serialises environment creation and deletion.
    envs_lock: Mutex<()>,
    limits: Limits,
    retention: Retention,
    metrics: Metrics,
    /// Per-environment size quotas (replaced on a configuration reload).
    size_quota: ArcSwap<SizeQuota>,
}

/// Unix time in ms.
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

impl Store {
    /// Opens (or creates) the store under `dir` and loads every environment
    /// into memory.
    pub fn open(
        dir: &Path,
        limits: Limits,
        retention: Retention,
        metrics: Metrics,
    ) -> Result<Store, StoreError> {
        let db = sled::Config::new().path(dir).open()?;
        let meta = db.open_tree("meta")?;
        let mut envs = HashMap::new();
        for m in persist::load_metas(&meta)? {
            let env = persist::load_env(&db, m, &limits, retention, &metrics)?;
            envs.insert(env.meta.load().name.clone(), Arc::new(env));
        }
        let store = Store {
            inner: Arc::new(Inner {
                db,
                meta,
                envs: ArcSwap::from_pointee(envs),
                envs_lock: Mutex::new(()),
                limits,
                retention,
                metrics,
                size_quota: ArcSwap::from_pointee(crate::quota::QuotaConfig::default().sizes()),
            }),
        };
        store.update_gauges();
        Ok(store)
    }

    /// Sets the per-environment size quotas (at start and on reload).
    pub fn set_size_quota(&self, q: SizeQuota) {
        self.inner.size_quota.store(Arc::new(q));
    }

    /// The validation limits in force.
    pub fn limits(&self) -> &Limits {
        &self.inner.limits
    }

    /// Metrics handle.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The sled database (for the admin token record).
    pub fn db(&self) -> &sled::Db {
        &self.inner.db
    }

    /// An environment by name.
    pub fn env(&self, name: &str) -> Result<Arc<Env>, StoreError> {
        self.inner.envs.load().get(name).cloned().ok_or_else(|| StoreError::EnvNotFound(name.to_owned()))
    }

    /// The environment, and the id of its SDK key, whose secret hashes to
    /// `hash`, if that key works now. Every key is compared in constant
    /// time.
    pub fn env_by_key_hash(&self, hash: &str) -> Option<(Arc<Env>, String)> {
        let now = now_ms();
        let mut found = None;
        for env in self.inner.envs.load().values() {
            for k in &env.meta.load().sdk_keys {
                if auth::constant_time_eq(&k.hash, hash) && k.valid_at(now) {
                    found = Some((env.clone(), k.id.clone()));
                }
            }
        }
        found
    }

    /// All environments, sorted by name.
    pub fn envs(&self) -> Vec<Arc<Env>> {
        let mut v: Vec<_> = self.inner.envs.load().values().cloned().collect();
        v.sort_by(|a, b| a.meta.load().name.cmp(&b.meta.load().name));
        v
    }

    /// Creates an environment; returns it and its SDK key (shown once,
    /// stored only as a hash). Completes even if the caller goes away.
    pub async fn create_env(
        &self,
        name: &str,
        description: &str,
        created_by: &str,
    ) -> Result<(Arc<Env>, String), StoreError> {
        let mut errors = Vec::new();
        let path = "name";
        if name.is_empty()
            || name.len() > 64
            || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            errors.push(flagstream::ValidationError {
                path: path.into(),
                message: format!("{name:?}: 1-64 bytes of A-Z a-z 0-9 - _"),
            });
        }
        if !errors.is_empty() {
            return Err(ValidationErrors(errors).into());
        }
        let (this, name, description) = (self.clone(), name.to_owned(), description.to_owned());
        let created_by = created_by.to_owned();
        detached(async move {
            let _guard = this.inner.envs_lock.lock().await;
            if this.inner.envs.load().contains_key(&name) {
                return Err(StoreError::EnvExists(name));
            }
            let store = this.clone();
            blocking(move || store.create_env_blocking(&name, &description, &created_by)).await
        })
        .await
    }

    fn create_env_blocking(
        &self,
        name: &str,
        description: &str,
        created_by: &str,
    ) -> Result<(Arc<Env>, String), StoreError> {
        // A crash during an earlier delete may have left this name's trees.
        persist::delete_env(&self.inner.db, &self.inner.meta, name)?;
        let sdk_key = auth::new_secret("fs_sdk_");
        let meta = EnvMeta {
            name: name.to_owned(),
            description: description.to_owned(),
            epoch: auth::new_epoch(),
            revision: 0,
            checksum: 0,
            committed_unix_ms: now_ms(),
            created_unix_ms: now_ms(),
            sdk_key_hash: String::new(),
            sdk_keys: vec![SdkKeyRecord {
                id: "k1".into(),
                name: "default".into(),
                hash: auth::hash_secret(&sdk_key),
                created_unix_ms: now_ms(),
                expires_unix_ms: 0,
                created_by: created_by.to_owned(),
            }],
            keys_made: 1,
            audit_head: String::new(),
        };
        persist::put_meta(&self.inner.meta, &meta)?;
        self.inner.db.flush()?;
        let state = EnvState::new(
            meta.name.clone(),
            meta.epoch.clone(),
            0,
            meta.committed_unix_ms,
            Arc::new(BTreeMap::new()),
            Arc::new(VecDeque::new()),
            Arc::new(Snapshot::empty()),
        );
        let env = Arc::new(Env::new(state, meta));
        let mut all = HashMap::clone(&self.inner.envs.load());
        all.insert(name.to_owned(), env.clone());
        self.inner.envs.store(Arc::new(all));
        self.update_gauges();
        Ok((env, sdk_key))
    }

    /// Deletes an environment and all its data. Subscribers see it vanish
    /// (their streams end). Completes even if the caller goes away.
    pub async fn delete_env(&self, name: &str, expected_revision: Option<u64>) -> Result<(), StoreError> {
        let (this, name) = (self.clone(), name.to_owned());
        detached(async move {
            let _guard = this.inner.envs_lock.lock().await;
            let env = this.env(&name)?;
            let _write = env.write.lock().await;
            env.check_writable()?;
            let current = env.state.load().revision;
            if let Some(expected) = expected_revision.filter(|e| *e != current) {
                return Err(StoreError::RevisionConflict { env: name, expected, current });
            }
            let (store, deleting) = (this.clone(), env.clone());
            blocking(move || store.delete_env_blocking(&name, &deleting)).await
        })
        .await
    }

    fn delete_env_blocking(&self, name: &str, env: &Env) -> Result<(), StoreError> {
        let outcome = persist::delete_env(&self.inner.db, &self.inner.meta, name)
            .and_then(|()| self.inner.db.flush().map(|_| ()).map_err(StoreError::from));
        if let Err(e) = outcome {
            // Part of the environment may be gone from disk: no write may
            // build on memory any more.
            self.poison(env, name, &e);
            return Err(e);
        }
        env.deleted.store(true, std::sync::atomic::Ordering::Release);
        let mut all = HashMap::clone(&self.inner.envs.load());
        all.remove(name);
        self.inner.envs.store(Arc::new(all));
        // Wake subscribers so they notice the environment is gone.
        env.head.send_modify(|h| *h = u64::MAX);
        let labels = vec![("env", name.to_owned())];
        let m = &self.inner.metrics;
        m.store_items.remove(&labels);
        m.store_bytes.remove(&labels);
        m.head_revision.remove(&labels);
        Ok(())
    }

    /// Applies `ops` atomically as one new revision of `env`. A batch that
    /// changes nothing commits nothing and returns the current revision.
    ///
    /// The write runs on a task of its own, its CPU and disk work on the
    /// blocking pool: a caller that goes away at any await (a deadline, a
    /// Ctrl-C) leaves the commit to finish whole (disk, memory,
    /// subscribers, audit) or, if it had not begun, not at all; and no
    /// runtime worker is held by validation or sled.
    pub async fn write(
        &self,
        env_name: &str,
        ops: Vec<Op>,
        expected_revision: Option<u64>,
        who: &Who,
        comment: &str,
    ) -> Result<WriteResult, StoreError> {
        let this = self.clone();
        let (env_name, who, comment) = (env_name.to_owned(), who.clone(), comment.to_owned());
        // Dropped with the caller's future: a write whose caller left while
        // it waited for the lock is not started at all (one that started
        // finishes whole).
        let caller = Arc::new(());
        let waiting = Arc::downgrade(&caller);
        let result = detached(async move {
            let result = this.write_inner(&env_name, ops, expected_revision, who, comment, waiting).await;
            let label = match &result {
                Ok(_) => "ok",
                Err(StoreError::Invalid(_)) => "invalid",
                Err(StoreError::Poisoned(_)) => "poisoned",
                Err(StoreError::Conflict { .. } | StoreError::RevisionConflict { .. }) => "conflict",
                Err(StoreError::ItemNotFound { .. } | StoreError::EnvNotFound(_)) => "not_found",
                Err(StoreError::Abandoned) => "abandoned",
                Err(StoreError::Quota { .. }) => "quota",
                Err(_) => "error",
            };
            this.inner.metrics.admin_writes.get_or_create(&vec![("result", label.to_owned())]).inc();
            result
        })
        .await;
        drop(caller);
        result
    }

    async fn write_inner(
        &self,
        env_name: &str,
        ops: Vec<Op>,
        expected_revision: Option<u64>,
        who: Who,
        comment: String,
        caller: std::sync::Weak<()>,
    ) -> Result<WriteResult, StoreError> {
        let env = self.env(env_name)?;
        let _write = env.write.lock().await;
        if caller.strong_count() == 0 {
            tracing::info!(env = %env_name, by = %who.principal, "write dropped: its caller went away before it started");
            return Err(StoreError::Abandoned);
        }
        env.check_writable()?;
        let state = env.state.load_full();
        if let Some(expected) = expected_revision.filter(|e| *e != state.revision) {
            return Err(StoreError::RevisionConflict {
                env: env_name.to_owned(),
                expected,
                current: state.revision,
            });
        }
        let (store, committing) = (self.clone(), env.clone());
        // `state` moves into the closure: if this write replaces it, the
        // last reference to a possibly huge state is dropped there, on the
        // blocking pool, not on a runtime worker.
        let result = blocking(move || {
            let result = store.commit_blocking(&committing, &state, ops, &who, &comment);
            drop(state);
            result
        })
        .await;
        if let Err(StoreError::Task(e)) = &result {
            if env.committing.load(std::sync::atomic::Ordering::Acquire) {
                // It panicked after reaching sled: disk is unknown.
                self.poison(&env, env_name, e);
            } else {
                tracing::error!(env = %env_name, error = %e, "write task failed before reaching storage; nothing was written");
            }
        }
        result
    }

    /// Plans, validates, commits, flushes and publishes one write; runs on
    /// the blocking pool under the environment's write lock.
    fn commit_blocking(
        &self,
        env: &Env,
        state: &EnvState,
        ops: Vec<Op>,
        who: &Who,
        comment: &str,
    ) -> Result<WriteResult, StoreError> {
        let env_name = state.name.as_str();
        let revision = state.revision + 1;
        let plan = op::plan(state, ops, revision, &self.inner.limits, |kind, key| {
            audit::last_actor(&self.inner.db, env_name, kind, key)
        })?;
        if plan.changes.is_empty() {
            return Ok(WriteResult { revision: state.revision, items: plan.versions });
        }
        let committed = now_ms();
        // New in-memory items and checksum.
        let mut items = BTreeMap::clone(&state.items);
        let mut entry_bytes = 0;
        for c in &plan.changes {
            match &c.bytes {
                Some(bytes) => {
                    entry_bytes += bytes.len();
                    let hash = state::item_hash(c.key.0, &c.key.1, bytes);
                    items
                        .insert(c.key.clone(), Item { bytes: bytes.clone(), hash, version: c.version_after });
                }
                None => {
                    entry_bytes += c.key.1.len();
                    items.remove(&c.key);
                }
            }
        }
        self.check_size_quota(env_name, &state.items, &items)?;
        let entry = LogEntry {
            revision,
            changed: plan.changes.iter().map(|c| c.key.clone()).collect(),
            committed_unix_ms: committed,
            bytes: entry_bytes,
        };
        let mut log = VecDeque::clone(&state.log);
        log.push_back(entry.clone());
        let trimmed = trim_log(&mut log, self.inner.retention);
        let mut meta = EnvMeta::clone(&env.meta.load());
        meta.revision = revision;
        meta.committed_unix_ms = committed;
        let new_state = EnvState::new(
            state.name.clone(),
            state.epoch.clone(),
            revision,
            committed,
            Arc::new(items),
            Arc::new(log),
            Arc::new(plan.snapshot.with_cursor(&state.epoch, revision)),
        );
        meta.checksum = new_state.checksum;
        // Durable before anyone is told: the caller, and the subscribers.
        env.committing.store(true, std::sync::atomic::Ordering::Release);
        let outcome = persist::commit(
            &self.inner.db,
            &self.inner.meta,
            &mut meta,
            &plan.changes,
            &entry,
            &trimmed,
            self.inner.retention.audit_floor(revision),
            who,
            comment,
        )
        .and_then(|audit_trimmed| {
            self.metrics().audit_trimmed.inc_by(audit_trimmed as u64);
            self.inner.db.flush().map(|_| ()).map_err(StoreError::from)
        });
        if let Err(e) = outcome {
            // Whether sled persisted the revision is unknown: building the
            // next write on memory could fork memory from disk.
            self.poison(env, env_name, &e);
            return Err(e);
        }
        env.meta.store(Arc::new(meta));
        env.state.store(Arc::new(new_state));
        env.head.send_replace(revision);
        env.committing.store(false, std::sync::atomic::Ordering::Release);
        self.update_env_gauges(env);
        Ok(WriteResult { revision, items: plan.versions })
    }

    /// Refuses a write that takes an environment past a size quota. A
    /// write that does not grow an exceeded dimension (after a quota was
    /// lowered) still goes through, so an environment can always shrink.
    fn check_size_quota(
        &self,
        env: &str,
        before: &BTreeMap<ItemKey, Item>,
        after: &BTreeMap<ItemKey, Item>,
    ) -> Result<(), StoreError> {
        let q = **self.inner.size_quota.load();
        let usage = |m: &BTreeMap<ItemKey, Item>| {
            let flags = m.keys().filter(|(k, _)| *k == Kind::Flag).count();
            let bytes: usize = m.values().map(|i| i.bytes.len()).sum();
            (flags, m.len() - flags, bytes)
        };
        let (b, a) = (usage(before), usage(after));
        let checks = [
            (a.0, b.0, q.flags, "flags", "flags", "quota-flags"),
            (a.1, b.1, q.segments, "segments", "segments", "quota-segments"),
            (
                a.2,
                b.2,
                q.snapshot_bytes,
                "bytes of flags and segments",
                "snapshot_bytes",
                "quota-snapshot-bytes",
            ),
        ];
        for (used, was, limit, what, quota, setting) in checks {
            if used > limit && used > was {
                self.inner.metrics.quota_refusal(env, quota);
                tracing::warn!(env, quota, used, limit, "quota refused a write");
                return Err(StoreError::Quota { env: env.to_owned(), what, quota, setting, used, limit });
            }
        }
        Ok(())
    }

    /// Stops all writes to `env` after a failure that may have left disk
    /// and memory apart; loud, counted.
    fn poison(&self, env: &Env, name: &str, error: &dyn std::fmt::Display) {
        env.poisoned.store(true, std::sync::atomic::Ordering::Release);
        tracing::error!(env = %name, error = %error, "commit failed; this environment refuses writes until the relay restarts");
        self.inner.metrics.limit_hit("storage_failure");
    }

    /// Audit entries of an environment, newest first.
    pub fn audit(
        &self,
        env: &str,
        key: Option<(Kind, &str)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
        self.env(env)?;
        audit::list(&self.inner.db, env, key, limit, before)
    }

    /// Checks an environment's audit hash chain (on the blocking pool; it
    /// reads every retained record). Taken under the environment's write
    /// lock, so no commit moves the chain's end meanwhile.
    pub async fn verify_audit(&self, env: &str) -> Result<Verification, StoreError> {
        let (this, env) = (self.clone(), self.env(env)?);
        let _write = env.write.lock().await;
        let head = env.meta.load().audit_head.clone();
        let name = env.meta.load().name.clone();
        blocking(move || audit::verify(&this.inner.db, &name, &head)).await
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

    /// Flushes sled (shutdown).
    pub async fn flush(&self) -> Result<(), StoreError> {
        self.inner.db.flush_async().await?;
        Ok(())
    }
}

/// Runs `work` on a task of its own and waits for it. The caller's future
/// may be dropped at this await: the task is not, so whatever `work` began
/// it finishes.
async fn detached<T: Send + 'static>(
    work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::spawn(work).await.map_err(StoreError::Task)?
}

/// Runs `work` on tokio's blocking pool (validation, compilation, sled).
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(work).await.map_err(StoreError::Task)?
}

/// Drops the oldest entries beyond the retention; returns their revisions.
fn trim_log(log: &mut VecDeque<LogEntry>, retention: Retention) -> Vec<u64> {
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
