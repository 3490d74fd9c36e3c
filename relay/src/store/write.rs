//! The admin write path: plan the ops against the current state (versions,
//! patches, validation, quotas), seal the audit records, commit one
//! revision through the backend, then publish it to memory and
//! subscribers. Cancel-safe and off the runtime's workers.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::backend::{Commit, ItemChange};
use super::budget::{self, Reserved, Stage};
use super::bulk::filling_order;
use super::meta::EnvMeta;
use super::op::{self, Op, WriteResult};
use super::state::{EnvState, Item, ItemKey, LogEntry, Totals};
use super::{CatchUpOutcome, Env, Store, StoreError, Who, audit, blocking, now_ms, trim_log};

/// Plans of one write against a shared database whose head kept moving
/// (writers of one environment at several relays).
const BEHIND_ATTEMPTS: usize = 64;

/// Writes of at least this many ops give the allocator's free pages back
/// to the system once done, whether they succeeded or failed once planned
/// (`allocator::release_free_memory`).
const LARGE_WRITE_OPS: usize = 100;
/// How long a write waits for the change feed to catch up before planning
/// again.
const CATCH_UP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A planned write: ready to commit, or changing nothing.
enum Prepared {
    Commit { commit: Box<Commit>, state: Box<EnvState>, result: WriteResult, budget: Option<Reserved> },
    NoOp(WriteResult),
}

impl Store {
    /// Applies `ops` atomically as one new revision of `env`. A batch that
    /// changes nothing commits nothing and returns the current revision.
    ///
    /// The write runs on a task of its own, its CPU work on the blocking
    /// pool: a caller that goes away at any await (a deadline, a Ctrl-C)
    /// leaves the commit to finish whole (disk, memory, subscribers, audit)
    /// or, if it had not begun, not at all; and no runtime worker is held
    /// by validation or storage.
    pub(crate) async fn write(
        &self,
        env_name: &str,
        ops: Vec<Op>,
        expected_revision: Option<u64>,
        who: &Who,
        comment: &str,
    ) -> Result<WriteResult, StoreError> {
        self.check_writable()?;
        let this = self.clone();
        let (env_name, who, comment) = (env_name.to_owned(), who.clone(), comment.to_owned());
        // Dropped with the caller's future: a write whose caller left while
        // it waited for the lock is not started at all (one that started
        // finishes whole).
        let caller = Arc::new(());
        let waiting = Arc::downgrade(&caller);
        let large = ops.len() >= LARGE_WRITE_OPS;
        // The write's span: what an operator follows from the call to the
        // commit (`revision` once committed) to the streams that deliver it
        // (their `subscribe` spans log `delivered` with the revision).
        let span = tracing::info_span!(
            "admin_write",
            env = %env_name,
            principal = %who.principal,
            ops = ops.len(),
            revision = tracing::field::Empty,
        );
        let result = self
            .detached(tracing::Instrument::instrument(
                async move {
                    let result =
                        this.write_inner(&env_name, ops, expected_revision, who, comment, waiting).await;
                    // Not after a refusal from the request alone: nothing of it was
                    // planned.
                    let planned = !matches!(&result, Err(StoreError::MemoryBudget(r)) if r.estimated);
                    if large && planned {
                        // Its transient blocks are free now, spread through the
                        // heap: give their pages back, so resident memory (what the
                        // memory budget reads) is what is in use.
                        let released =
                            tokio::task::spawn_blocking(crate::ops::allocator::release_free_memory).await;
                        if let Err(e) = released {
                            tracing::warn!(error = %e, "releasing free memory after a large write failed");
                        }
                    }
                    let label = match &result {
                        Ok(_) => "ok",
                        Err(StoreError::Invalid(_)) => "invalid",
                        Err(StoreError::Poisoned(_)) => "poisoned",
                        Err(StoreError::Conflict { .. } | StoreError::RevisionConflict { .. }) => "conflict",
                        Err(StoreError::ItemNotFound { .. } | StoreError::EnvNotFound(_)) => "not_found",
                        Err(StoreError::Abandoned) => "abandoned",
                        Err(StoreError::Quota { .. } | StoreError::MemoryBudget(_)) => "quota",
                        Err(_) => "error",
                    };
                    this.inner.metrics.admin_writes.get_or_create(&vec![("result", label.to_owned())]).inc();
                    // Limits the refused write ran into (`… (max_regex_patterns)`).
                    if let Err(StoreError::Invalid(v)) = &result {
                        for limit in v.limits() {
                            this.inner.metrics.limit_hit(limit);
                        }
                    }
                    result
                },
                span,
            ))
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
        // A shared database's head can move under this relay (another relay
        // wrote): then the write is planned again on the new state, after
        // the change feed brought it in, a bounded number of times.
        let mut behind = None;
        for attempt in 0..BEHIND_ATTEMPTS {
            let write = env.write.lock().await;
            if attempt == 0 && caller.strong_count() == 0 {
                tracing::info!(env = %env_name, by = %who.principal, "write dropped: its caller went away before it started");
                return Err(StoreError::Abandoned);
            }
            env.check_writable()?;
            self.check_committing(&env, env_name)?;
            // A shared database: lock the environment's row there first
            // (writers at every relay queue on it), and bring memory to the
            // database's head, so the plan is made on exactly the state the
            // commit replaces.
            let mut lock = self.inner.backend.lock_for_write(env_name).await?;
            if let Some(l) = &lock {
                let head = (l.head().0.to_owned(), l.head().1);
                let seen = |env: &Env| {
                    let s = env.state.load();
                    (s.epoch.clone(), s.revision)
                };
                if seen(&env) != head {
                    // Catching up reads without blocking on the row; only a
                    // new epoch (lost history) writes it, and that needs the
                    // row released first.
                    self.metrics().limit_hit("write_behind");
                    if self.catch_up_locked(&env, true).await == CatchUpOutcome::NeedsRowUnlocked {
                        lock = None;
                        self.catch_up_locked(&env, false).await;
                    }
                }
                if lock.is_none() || seen(&env) != head {
                    let (epoch, current) = head;
                    drop(lock);
                    drop(write);
                    self.wait_for_head(&env, &epoch, current).await;
                    behind = Some(StoreError::Behind { env: env_name.to_owned(), epoch, current });
                    continue;
                }
            }
            if let Some(l) = &lock {
                // Memory is at the database's head; so is the audit chain,
                // whichever relay sealed its last record.
                self.set_audit_head(&env, l.audit_head());
            }
            let state = env.state.load_full();
            if let Some(expected) = expected_revision.filter(|e| *e != state.revision) {
                return Err(StoreError::RevisionConflict {
                    env: env_name.to_owned(),
                    expected,
                    current: state.revision,
                });
            }
            let (store, planning) = (self.clone(), env.clone());
            let (ops, who2, comment2) = (ops.clone(), who.clone(), comment.clone());
            let prepared = blocking(move || store.prepare(&planning, &state, ops, &who2, &comment2)).await;
            // Held until the write is published or has failed.
            let (commit, state, result, _budget) = match prepared {
                Ok(Prepared::Commit { commit, state, result, budget }) => (*commit, *state, result, budget),
                Ok(Prepared::NoOp(result)) => return Ok(result),
                Err(StoreError::Conflict { kind, key, expected, current, changed_by: None }) => {
                    let changed_by = match current {
                        0 => None,
                        _ => self.inner.backend.last_actor(env_name.to_owned(), kind, key.clone()).await,
                    };
                    return Err(StoreError::Conflict { kind, key, expected, current, changed_by });
                }
                Err(e) => {
                    if let StoreError::Task(e) = &e {
                        tracing::error!(env = %env_name, error = %e, "write task failed before reaching storage; nothing was written");
                    }
                    return Err(e);
                }
            };
            let meta = commit.meta.clone();
            // Durable before anyone is told: the caller, and the subscribers.
            env.committing.store(true, Ordering::Release);
            let started = std::time::Instant::now();
            let committed = match lock {
                Some(l) => l.commit(commit).await,
                None => self.inner.backend.commit(commit).await,
            };
            self.metrics().commit_latency.observe(started.elapsed().as_secs_f64());
            match committed {
                Ok(done) => {
                    self.metrics().audit_trimmed.inc_by(done.audit_trimmed as u64);
                    tracing::Span::current().record("revision", result.revision);
                    tracing::info!(
                        revision = result.revision,
                        commit_ms = started.elapsed().as_millis() as u64,
                        items = result.items.len(),
                        "write committed"
                    );
                    self.publish(&env, meta, state);
                    env.committing.store(false, Ordering::Release);
                    return Ok(result);
                }
                Err(StoreError::Behind { env: name, epoch, current }) => {
                    // Refused before anything was written: not a failure.
                    env.committing.store(false, Ordering::Release);
                    drop(write);
                    self.metrics().limit_hit("write_behind");
                    tracing::debug!(env = %name, current, "another relay wrote first; planning again");
                    self.wait_for_head(&env, &epoch, current).await;
                    behind = Some(StoreError::Behind { env: name, epoch, current });
                }
                Err(e) => {
                    // Whether the revision reached storage is unknown: building
                    // the next write on memory could fork memory from disk.
                    self.poison(&env, env_name, &e);
                    // Reported and handled here: not a commit that died.
                    env.committing.store(false, Ordering::Release);
                    return Err(e);
                }
            }
        }
        Err(behind.unwrap_or(StoreError::Abandoned))
    }

    /// Under `env`'s write lock: a commit still marked as in progress
    /// reached storage and its task ended before publishing it (a panic),
    /// so disk may hold a revision memory does not. The environment is
    /// poisoned (refuses writes until a restart reloads it from disk; a
    /// shared database's is brought to the database's head by the change
    /// feed instead).
    pub(super) fn check_committing(&self, env: &Env, name: &str) -> Result<(), StoreError> {
        if env.committing.swap(false, Ordering::AcqRel) {
            self.poison(
                env,
                name,
                &"a commit's task ended after the revision reached storage and before it was published (a panic): storage may hold a revision memory does not",
            );
        }
        env.check_writable()
    }

    /// Waits (at most [`CATCH_UP_WAIT`]) until the change feed brought `env`
    /// to `epoch` at `revision` or later, asking it to look now.
    async fn wait_for_head(&self, env: &Env, epoch: &str, revision: u64) {
        self.inner.feed_kick.notify_one();
        let mut head = env.head.subscribe();
        let ours = env.state.load().epoch.clone();
        // Caught up, or reloaded into another epoch (a restored database).
        let caught_up = head.wait_for(|_| {
            let s = env.state.load();
            (s.epoch == epoch && s.revision >= revision) || s.epoch != ours
        });
        if tokio::time::timeout(CATCH_UP_WAIT, caught_up).await.is_err() {
            tracing::warn!(env = %env.meta.load().name, revision, "the change feed did not catch up in time");
        }
    }

    /// Swaps a committed revision into memory and wakes its subscribers;
    /// the replaced state (possibly large) is dropped on the blocking pool.
    pub(crate) fn publish(&self, env: &Env, meta: EnvMeta, state: EnvState) {
        #[cfg(test)]
        tests::maybe_panic(&meta.name);
        let revision = state.revision;
        env.meta.store(Arc::new(meta));
        let old = env.state.swap(Arc::new(state));
        env.head.send_replace(revision);
        env.waiters.wake_all();
        self.update_env_gauges(env);
        tokio::task::spawn_blocking(move || drop(old));
    }

    /// Plans, validates and builds one write.
    /// Runs on the blocking pool under the environment's write lock.
    fn prepare(
        &self,
        env: &Env,
        state: &EnvState,
        ops: Vec<Op>,
        who: &Who,
        comment: &str,
    ) -> Result<Prepared, StoreError> {
        let env_name = state.name.as_str();
        let revision = state.revision + 1;
        // The memory budget, from the request alone: a write that cannot
        // fit allocates nothing of its plan.
        // Without a budget the request is not measured (it would encode
        // every put once more than planning does).
        let before_bytes = state.item_bytes() as u64;
        let budgeted = self.inner.size_quota.load().memory_budget > 0;
        let request = budgeted.then(|| budget::Request::of(&ops, &state.items));
        if let Some(request) = request.filter(|r| r.growth > 0) {
            let estimated = before_bytes.saturating_add(request.growth as u64);
            self.check_memory_budget(env_name, before_bytes, estimated, request, Stage::Request)?;
        }
        let plan = op::plan(state, ops, revision, &self.inner.limits)?;
        if plan.changes.is_empty() {
            return Ok(Prepared::NoOp(WriteResult { revision: state.revision, items: plan.versions }));
        }
        let committed = now_ms();
        // A copy sharing every unchanged item, and the totals moved by the
        // change alone. The keys are distinct: inserted in the order that
        // leaves the map's leaves full (`bulk.rs`).
        let mut items = state.items.clone();
        let mut totals = state.totals();
        let mut entry_bytes = 0;
        for c in filling_order(&plan.changes, |c| &c.key) {
            let new =
                c.bytes.as_ref().map(|bytes| Item::new(c.key.0, &c.key.1, bytes.clone(), c.version_after));
            entry_bytes += c.bytes.as_ref().map_or(c.key.1.len(), |b| b.len());
            totals.put(&mut items, c.key.clone(), new);
        }
        // The environment's item bytes after the write.
        let after_bytes = totals.bytes as u64;
        self.check_size_quota(env_name, state.totals(), totals)?;
        let budget = match request {
            Some(request) => {
                self.check_memory_budget(env_name, before_bytes, after_bytes, request, Stage::Planned)?
            }
            None => None,
        };
        let entry = LogEntry {
            revision,
            changed: plan.changes.iter().map(|c| c.key.clone()).collect(),
            committed_unix_ms: committed,
            bytes: entry_bytes,
            diffed_from: None,
            commit_id: String::new(),
        };
        let mut log = state.log.clone();
        log.push_back(Arc::new(entry.clone()));
        let trimmed = trim_log(&mut log, self.inner.retention);
        let mut meta = EnvMeta::clone(&env.meta.load());
        let before = |k: &ItemKey| state.items.get(k).map(|i| i.bytes.as_ref());
        let audit =
            audit::seal(&plan.changes, before, revision, committed, who, comment, &mut meta.audit_head)?;
        let new_state = EnvState::with_totals(
            state.name.clone(),
            state.epoch.clone(),
            revision,
            committed,
            items,
            totals,
            log,
            Arc::new(plan.snapshot.with_cursor(&state.epoch, revision)),
        );
        meta.revision = revision;
        meta.committed_unix_ms = committed;
        meta.checksum = new_state.checksum();
        let commit = Commit {
            meta,
            base: state.revision,
            items: plan
                .changes
                .iter()
                .map(|c| ItemChange { key: c.key.clone(), bytes: c.bytes.clone(), shared: c.shared.clone() })
                .collect::<Vec<_>>()
                .into(),
            entry: Some(entry),
            trimmed,
            reset_log: false,
            audit,
            audit_floor: self.inner.retention.audit_floor(revision),
            request_id: crate::ops::secret::new_epoch(),
        };
        let result = WriteResult { revision, items: plan.versions };
        Ok(Prepared::Commit { commit: Box::new(commit), state: Box::new(new_state), result, budget })
    }

    /// Refuses a write that takes an environment past a size quota. A
    /// write that does not grow an exceeded dimension (after a quota was
    /// lowered) still goes through, so an environment can always shrink.
    fn check_size_quota(&self, env: &str, before: Totals, after: Totals) -> Result<(), StoreError> {
        let q = **self.inner.size_quota.load();
        let usage = |t: Totals| (t.flags, t.segments, t.bytes);
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
                return Err(StoreError::Quota { env: env.to_owned(), what, quota, setting, used, limit });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    use flagstream::{FlagSet, Limits};

    use super::super::sled::SledBackend;
    use super::super::{Backend, Retention, Source, Store, StoreError, Who};
    use super::Op;
    use crate::ops::metrics::Metrics;

    /// The environment whose next publish panics (unit tests only).
    static PANIC_PUBLISHING: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

    pub(super) fn maybe_panic(env: &str) {
        let mut armed = PANIC_PUBLISHING.lock().unwrap_or_else(|p| p.into_inner());
        if armed.as_deref() == Some(env) {
            *armed = None;
            drop(armed);
            panic!("injected: a panic while publishing a committed revision");
        }
    }

    fn flag(key: &str) -> Op {
        let set: FlagSet = serde_yaml_ng::from_str(&format!(
            "flags:\n  - key: {key}\n    type: bool\n    variations: [false, true]\n    on: true\n    off_variation: 0\n    fallthrough: {{variation: 1}}\n"
        ))
        .unwrap();
        Op::PutFlag { flag: set.flags.into_iter().next().unwrap(), expected: None }
    }

    async fn open(dir: &std::path::Path) -> Store {
        let backend: Arc<dyn Backend> = Arc::new(SledBackend::open(&dir.join("db")).unwrap());
        let retention = Retention { revisions: 100, bytes: 1 << 20, audit_revisions: 100 };
        Store::open(backend, Limits::default(), retention, Metrics::new(), Source::Primary).await.unwrap()
    }

    /// A panic between the durable commit and the publish leaves storage a
    /// revision ahead of memory: the environment refuses every later write
    /// (it would reuse that revision) until a restart loads storage.
    #[tokio::test]
    async fn a_panic_after_a_durable_commit_poisons_the_environment() {
        const ENV: &str = "panic-in-publish";
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let who = Who::relay("test");
        store.create_env(ENV, "", &who).await.unwrap();
        let r1 = store.write(ENV, vec![flag("a")], None, &who, "").await.unwrap().revision;
        *PANIC_PUBLISHING.lock().unwrap() = Some(ENV.to_owned());
        let e = store.write(ENV, vec![flag("b")], None, &who, "").await.unwrap_err();
        assert!(matches!(e, StoreError::Task(_)), "{e}");
        assert_eq!(store.env(ENV).unwrap().state.load().revision, r1, "memory was not published");
        let e = store.write(ENV, vec![flag("c")], None, &who, "").await.unwrap_err();
        assert!(matches!(e, StoreError::Poisoned(_)), "the next write must be refused: {e:?}");
        assert!(e.to_string().contains(ENV), "{e}");
        drop(store);
        // Storage has the write memory lost: a restart serves it.
        let store = open(dir.path()).await;
        assert_eq!(store.env(ENV).unwrap().state.load().revision, r1 + 1);
        let r = store.write(ENV, vec![flag("c")], None, &who, "").await.unwrap().revision;
        assert_eq!(r, r1 + 2);
    }

    /// What the memory budget sets aside for writes being applied counts
    /// against every other write, and is released once a write is done.
    #[tokio::test]
    async fn the_memory_budget_counts_writes_being_applied() {
        const ENV: &str = "budget";
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let who = Who::relay("test");
        store.create_env(ENV, "", &who).await.unwrap();
        let budget = 1u64 << 40;
        store.set_size_quota(crate::ops::limit::SizeQuota {
            memory_budget: budget,
            ..crate::ops::limit::QuotaConfig::default().sizes()
        });
        store.write(ENV, vec![flag("a")], None, &who, "").await.expect("within the budget");
        assert_eq!(store.inner.budget_reserved.load(Ordering::Relaxed), 0, "released once published");
        // Writes being applied elsewhere hold the whole budget.
        store.inner.budget_reserved.fetch_add(budget, Ordering::Relaxed);
        let e = store.write(ENV, vec![flag("b")], None, &who, "").await.unwrap_err();
        match &e {
            StoreError::MemoryBudget(r) => assert_eq!((r.reserved, r.budget), (budget, budget)),
            other => panic!("refused by the budget, not {other:?}"),
        }
        assert!(e.to_string().contains("set aside for other writes"), "{e}");
        store.inner.budget_reserved.fetch_sub(budget, Ordering::Relaxed);
        store.write(ENV, vec![flag("b")], None, &who, "").await.expect("once they are done");
    }

    /// A write that does not grow the environment passes whatever the
    /// budget: a delete and a toggle with resident memory far past it; a
    /// write that grows it is refused before it is planned.
    #[tokio::test]
    async fn a_write_that_does_not_grow_always_passes_the_budget() {
        const ENV: &str = "shrink";
        let dir = tempfile::tempdir().unwrap();
        let store = open(dir.path()).await;
        let who = Who::relay("test");
        store.create_env(ENV, "", &who).await.unwrap();
        store.write(ENV, vec![flag("a"), flag("b")], None, &who, "").await.unwrap();
        store.set_size_quota(crate::ops::limit::SizeQuota {
            memory_budget: 1,
            ..crate::ops::limit::QuotaConfig::default().sizes()
        });
        let e = store.write(ENV, vec![flag("c")], None, &who, "").await.unwrap_err();
        match &e {
            StoreError::MemoryBudget(r) => assert!(r.estimated, "refused from the request, before planning"),
            other => panic!("refused by the budget, not {other:?}"),
        }
        store.write(ENV, vec![flag("a")], None, &who, "").await.expect("the same flag again: no growth");
        store
            .write(ENV, vec![Op::DeleteFlag { key: "b".into(), expected: None }], None, &who, "")
            .await
            .expect("a delete always passes");
    }
}
