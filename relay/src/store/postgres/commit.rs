//! One write on PostgreSQL: the transaction that locks the environment's
//! row, checks the head the write was planned on, writes items, history,
//! audit and the request id, and queues the notification; and, when the
//! connection is lost at COMMIT, the lookup that tells whether it happened
//! once that transaction has ended.

use std::time::Duration;

use async_trait::async_trait;

use super::{CHANNEL, PostgresBackend, connection_lost, db, kind_code};
use crate::store::backend::{Commit, Committed, WriteLock};
use crate::store::{StoreError, corrupt};

/// How long to wait for a commit whose outcome a lost connection hid to
/// end and be looked up, before answering that its outcome is unknown.
const LOOKUP_FOR: Duration = Duration::from_secs(10);

/// How often that lookup is retried while the database cannot answer.
const LOOKUP_EVERY: Duration = Duration::from_millis(200);

/// How one commit attempt failed.
enum Attempt {
    /// It did not happen, and retrying cannot change that.
    Definite(StoreError),
    /// The connection failed before COMMIT: it did not happen; try again.
    Retry(StoreError),
    /// The connection failed at COMMIT: it may or may not have happened.
    Ambiguous(StoreError),
}

impl PostgresBackend {
    /// [`Backend::lock_for_write`](crate::store::backend::Backend::lock_for_write):
    /// the environment's row locked in a transaction, as a [`WriteLock`].
    pub(super) async fn lock_env(&self, env: &str) -> Result<Box<dyn WriteLock>, StoreError> {
        match self.begin(env).await {
            Ok(locked) => Ok(Box::new(PgWriteLock { backend: self.clone(), locked })),
            Err(Attempt::Definite(e)) => Err(e),
            Err(Attempt::Retry(e) | Attempt::Ambiguous(e)) => {
                Err(StoreError::DatabaseUnavailable(Box::new(e)))
            }
        }
    }

    /// One commit attempt and, if its outcome was hidden, the lookup.
    pub(super) async fn commit_once(&self, commit: &Commit) -> Result<Committed, StoreError> {
        let attempt = self.try_commit(commit).await;
        self.outcome(commit, attempt).await
    }

    /// Begins a write of `env`: a transaction holding the environment
    /// row's lock (so writers of one environment, at any relay, queue in
    /// revision order) and the database's head.
    async fn begin(&self, env: &str) -> Result<Locked, Attempt> {
        let retry = |e: tokio_postgres::Error| {
            if connection_lost(&e) { Attempt::Retry(db(e)) } else { Attempt::Definite(db(e)) }
        };
        let client = self.client().await.map_err(Attempt::Retry)?;
        client.batch_execute("BEGIN").await.map_err(retry)?;
        let mut locked =
            Locked { client: Some(client), epoch: String::new(), revision: 0, audit_head: String::new() };
        let row = locked
            .c()
            .query_opt(
                "SELECT epoch, revision, audit_head FROM flagstream_envs WHERE name = $1 FOR UPDATE",
                &[&env],
            )
            .await
            .map_err(retry)?
            .ok_or_else(|| Attempt::Definite(StoreError::EnvNotFound(env.to_owned())))?;
        locked.epoch = row.get(0);
        locked.revision = row.get::<_, i64>(1) as u64;
        locked.audit_head = row.get(2);
        Ok(locked)
    }

    /// One attempt at a commit planned on `c.base`.
    async fn try_commit(&self, c: &Commit) -> Result<Committed, Attempt> {
        let locked = self.begin(&c.meta.name).await?;
        if locked.epoch != c.meta.epoch || locked.revision != c.base {
            let (env, epoch, current) = (c.meta.name.clone(), locked.epoch.clone(), locked.revision);
            return Err(Attempt::Definite(StoreError::Behind { env, epoch, current }));
        }
        locked.finish(c).await
    }

    /// What one commit attempt means for its caller.
    async fn outcome(
        &self,
        c: &Commit,
        attempt: Result<Committed, Attempt>,
    ) -> Result<Committed, StoreError> {
        match attempt {
            Ok(done) => Ok(done),
            Err(Attempt::Definite(e)) => Err(e),
            // Lost before COMMIT: nothing happened; the caller may retry
            // (DatabaseUnavailable is UNAVAILABLE, retryable).
            Err(Attempt::Retry(e)) => Err(StoreError::DatabaseUnavailable(Box::new(e))),
            Err(Attempt::Ambiguous(e)) => match self.resolve(&c.meta.name, &c.request_id, e).await? {
                Some(done) => Ok(done),
                None => Err(StoreError::DatabaseUnavailable("the commit did not happen".into())),
            },
        }
    }

    /// After a connection lost at COMMIT: waits for the transaction to end,
    /// then looks the write's request id up. `Some`: it committed; `None`:
    /// it ended without committing (retry it); `OutcomeUnknown`: it had not
    /// ended within [`LOOKUP_FOR`] (still waiting for a synchronous standby,
    /// say), or the database could not be asked.
    async fn resolve(
        &self,
        env: &str,
        request_id: &str,
        e: StoreError,
    ) -> Result<Option<Committed>, StoreError> {
        tracing::warn!(error = %e, "the database connection failed during the commit; looking its request id up");
        let deadline = tokio::time::Instant::now() + LOOKUP_FOR;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.committed(env, request_id, left).await {
                Some(true) => {
                    tracing::info!(request = %request_id, "the commit had happened: its request id is in the database");
                    return Ok(Some(Committed::default()));
                }
                Some(false) => {
                    tracing::info!(request = %request_id, "the commit had not happened: its transaction ended without its request id");
                    return Ok(None);
                }
                None if tokio::time::Instant::now() + LOOKUP_EVERY < deadline => {
                    tokio::time::sleep(LOOKUP_EVERY).await;
                }
                None => {
                    tracing::error!(request = %request_id, "the commit's outcome could not be confirmed in time (its transaction had not ended, or the database did not answer)");
                    return Err(StoreError::OutcomeUnknown(Box::new(e)));
                }
            }
        }
    }

    /// Whether the write with `request_id` to `env` committed, once its
    /// transaction has ended (`None`: not known within `wait`).
    ///
    /// A plain read is not enough: a transaction that sent its COMMIT may
    /// still be running (flushing, or waiting for a synchronous standby),
    /// and until it ends its rows are invisible to everyone else. It holds
    /// the environment's row lock (`FOR UPDATE`, taken by every write) to
    /// its end, so the lookup first takes that row `FOR SHARE`, which waits
    /// for it, and reads the request id after, in a snapshot taken once it
    /// has ended. The connection is used for nothing else: it is closed
    /// afterwards, so a lookup given up while it waits leaves nothing
    /// behind in the pool.
    async fn committed(&self, env: &str, request_id: &str, wait: Duration) -> Option<bool> {
        let c = deadpool_postgres::Object::take(self.client().await.ok()?);
        let lookup = async {
            // The server gives up the wait itself, so the session ends clean.
            let ms = wait.as_millis().clamp(1, i32::MAX as u128);
            c.batch_execute(&format!("BEGIN; SET LOCAL lock_timeout = {ms}")).await?;
            c.query_opt("SELECT 1 FROM flagstream_envs WHERE name = $1 FOR SHARE", &[&env]).await?;
            let found =
                c.query_opt("SELECT revision FROM flagstream_requests WHERE id = $1", &[&request_id]).await?;
            // Rolled back, not committed: the row lock gave this
            // transaction an id, and its COMMIT would wait for a
            // synchronous standby too.
            c.batch_execute("ROLLBACK").await?;
            Ok::<_, tokio_postgres::Error>(found.is_some())
        };
        match tokio::time::timeout(wait + Duration::from_secs(1), lookup).await {
            Ok(Ok(found)) => Some(found),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "looking a commit's request id up failed");
                None
            }
            Err(_) => None,
        }
    }
}

/// A write transaction holding one environment row's lock. Dropped without
/// `finish`, its connection is closed (not returned to the pool): the
/// database rolls the transaction back.
struct Locked {
    client: Option<deadpool_postgres::Object>,
    epoch: String,
    revision: u64,
    audit_head: String,
}

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(c) = self.client.take() {
            // Leaves the pool and closes: an open transaction must never be
            // handed to another write.
            drop(deadpool_postgres::Object::take(c));
        }
    }
}

impl Locked {
    fn c(&self) -> &tokio_postgres::Client {
        self.client.as_ref().expect("a connection until finished")
    }

    /// Writes `c` and commits; the connection goes back to the pool.
    async fn finish(mut self, c: &Commit) -> Result<Committed, Attempt> {
        let done = self.write(c).await?;
        // Committed: the connection is clean again.
        drop(self.client.take());
        Ok(done)
    }

    async fn write(&self, c: &Commit) -> Result<Committed, Attempt> {
        let retry = |e: tokio_postgres::Error| {
            if connection_lost(&e) { Attempt::Retry(db(e)) } else { Attempt::Definite(db(e)) }
        };
        let name = c.meta.name.as_str();
        let Some(entry) = &c.entry else {
            return Err(Attempt::Definite(StoreError::Storage(
                "a shared database commits one log entry per revision".into(),
            )));
        };
        let rev = entry.revision as i64;
        self.c()
            .execute(
                "INSERT INTO flagstream_requests (id, env, revision) VALUES ($1, $2, $3)",
                &[&c.request_id, &name, &rev],
            )
            .await
            .map_err(retry)?;
        self.c().execute(
            "UPDATE flagstream_envs SET revision = $2, checksum = $3, committed_unix_ms = $4, audit_head = $5 WHERE name = $1",
            &[&name, &rev, &(c.meta.checksum as i64), &(c.meta.committed_unix_ms as i64), &c.meta.audit_head],
        )
        .await
        .map_err(retry)?;
        let (mut up_kind, mut up_key, mut up_bytes, mut del_kind, mut del_key) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut h_kind, mut h_key, mut h_bytes) = (Vec::new(), Vec::new(), Vec::new());
        for i in c.items.iter() {
            h_kind.push(kind_code(i.key.0));
            h_key.push(i.key.1.clone());
            h_bytes.push(i.bytes.map(|b| b.to_vec()));
            match i.bytes {
                Some(b) => {
                    up_kind.push(kind_code(i.key.0));
                    up_key.push(i.key.1.clone());
                    up_bytes.push(b.to_vec());
                }
                None => {
                    del_kind.push(kind_code(i.key.0));
                    del_key.push(i.key.1.clone());
                }
            }
        }
        self.c()
            .execute(
                "INSERT INTO flagstream_items (env, kind, key, bytes)
             SELECT $1, k, n, b FROM unnest($2::smallint[], $3::text[], $4::bytea[]) AS u (k, n, b)
             ON CONFLICT (env, kind, key) DO UPDATE SET bytes = EXCLUDED.bytes",
                &[&name, &up_kind, &up_key, &up_bytes],
            )
            .await
            .map_err(retry)?;
        self.c()
            .execute(
                "DELETE FROM flagstream_items WHERE env = $1
             AND (kind, key) IN (SELECT k, n FROM unnest($2::smallint[], $3::text[]) AS u (k, n))",
                &[&name, &del_kind, &del_key],
            )
            .await
            .map_err(retry)?;
        self.c().execute(
            "INSERT INTO flagstream_history (env, revision, commit_id, committed_unix_ms, checksum, bytes)
             VALUES ($1, $2, $3, $4, $5, $6)",
            &[
                &name,
                &rev,
                &c.request_id,
                &(entry.committed_unix_ms as i64),
                &(c.meta.checksum as i64),
                &(entry.bytes as i64),
            ],
        )
        .await
        .map_err(retry)?;
        self.c()
            .execute(
                "INSERT INTO flagstream_history_items (env, revision, kind, key, bytes)
             SELECT $1, $2, k, n, b FROM unnest($3::smallint[], $4::text[], $5::bytea[]) AS u (k, n, b)",
                &[&name, &rev, &h_kind, &h_key, &h_bytes],
            )
            .await
            .map_err(retry)?;
        let (mut seqs, mut a_kind, mut a_key, mut records) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for ((_, seq), r) in &c.audit {
            seqs.push(*seq as i32);
            a_kind.push(r.kind.map_or(0, kind_code));
            a_key.push(r.key.clone());
            records.push(
                serde_json::to_value(r)
                    .map_err(|e| Attempt::Definite(corrupt("audit record (while encoding)".into(), e)))?,
            );
        }
        self.c().execute(
            "INSERT INTO flagstream_audit (env, revision, seq, kind, key, record)
             SELECT $1, $2, s, k, n, r FROM unnest($3::integer[], $4::smallint[], $5::text[], $6::jsonb[]) AS u (s, k, n, r)",
            &[&name, &rev, &seqs, &a_kind, &a_key, &records],
        )
        .await
        .map_err(retry)?;
        let mut trimmed = 0;
        if let Some(floor) = c.audit_floor {
            trimmed = self
                .c()
                .execute(
                    "DELETE FROM flagstream_audit WHERE env = $1 AND revision <= $2",
                    &[&name, &(floor as i64)],
                )
                .await
                .map_err(retry)?;
        }
        self.c()
            .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("rev:{name}:{rev}")])
            .await
            .map_err(retry)?;
        self.c().batch_execute("COMMIT").await.map_err(|e| {
            if connection_lost(&e) { Attempt::Ambiguous(db(e)) } else { Attempt::Definite(db(e)) }
        })?;
        Ok(Committed { audit_trimmed: trimmed as usize })
    }
}

/// [`WriteLock`] of the PostgreSQL backend.
struct PgWriteLock {
    backend: PostgresBackend,
    locked: Locked,
}

#[async_trait]
impl WriteLock for PgWriteLock {
    fn head(&self) -> (&str, u64) {
        (&self.locked.epoch, self.locked.revision)
    }

    fn audit_head(&self) -> &str {
        &self.locked.audit_head
    }

    async fn commit(self: Box<Self>, commit: Commit) -> Result<Committed, StoreError> {
        let PgWriteLock { backend, locked } = *self;
        let attempt = locked.finish(&commit).await;
        backend.outcome(&commit, attempt).await
    }
}
