//! The PostgreSQL backend: every relay of a deployment is a writer on one
//! database, and all follow its change feed (`crate::feed`).
//!
//! One write is one transaction: the environment's row is locked
//! (`SELECT … FOR UPDATE`, so writers of one environment commit in
//! revision order, gap-free), the commit refuses with
//! [`StoreError::Behind`] unless the stored head is the revision the write
//! was planned on (so every expected version was checked against exactly
//! the state it replaces), then the items, the history row and its items,
//! the audit records and the request id are written and a notification is
//! queued; a conflict rolls everything back. A connection lost during the
//! commit leaves its outcome unknown: once that transaction has ended (its
//! row lock is waited for), the request id, written in the same
//! transaction, is looked up to tell. Schema migrations (`postgres/*.sql`)
//! are embedded and applied at start under an advisory lock.

pub(crate) mod query;
pub(crate) mod tls;
mod token;

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};

use super::audit::{self, AuditPos, AuditRecord};
use super::backend::{AuditRows, Backend, Commit, Committed, Loaded, MetaChange, Revoked, WriteLock};
use super::meta::EnvMeta;
use super::state::{Kind, LogEntry};
use super::{Retention, StoreError, corrupt, trim_log};
use crate::store::token::TokenRecord;

/// The notification channel every relay LISTENs on. Payloads:
/// `rev:ENV:REVISION`, `meta:ENV`, `env:ENV`, `tokens`.
pub(crate) const CHANNEL: &str = "flagstream";

/// Advisory lock key of schema migrations ("flagstrm" in ASCII).
const MIGRATION_LOCK: i64 = 0x666c_6167_7374_726d;

/// The migrations, in order; version = index + 1.
const MIGRATIONS: &[&str] = &[include_str!("postgres/schema.sql"), include_str!("postgres/schema-2.sql")];

/// Connections in the pool (writes, reads, the pruner); the feed's
/// listening session is separate.
const POOL_SIZE: usize = 8;

/// How long to wait for a commit whose outcome a lost connection hid to
/// end and be looked up, before answering that its outcome is unknown.
const LOOKUP_FOR: Duration = Duration::from_secs(10);

/// How often that lookup is retried while the database cannot answer.
const LOOKUP_EVERY: Duration = Duration::from_millis(200);

/// A database error, kept as the cause: `DatabaseUnavailable` when the
/// database cannot be reached or cannot take the request now (connection
/// lost or refused, the pool timed out, an administrator shutdown, a
/// read-only standby, out of resources), else a storage error.
pub(crate) fn db(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    let any: &(dyn std::error::Error + 'static) = &e;
    let unavailable = match any.downcast_ref::<tokio_postgres::Error>() {
        Some(pg) => unreachable(pg),
        None => any.downcast_ref::<deadpool_postgres::PoolError>().is_some(),
    };
    if unavailable { StoreError::DatabaseUnavailable(Box::new(e)) } else { StoreError::Storage(Box::new(e)) }
}

/// Whether a PostgreSQL error means "not now" rather than "not this":
/// the connection is gone, or SQLSTATE class 08 (connection), 53
/// (insufficient resources), 57 (operator intervention: shutdown, cannot
/// connect now), or 25006 (a read-only standby).
fn unreachable(e: &tokio_postgres::Error) -> bool {
    connection_lost(e)
        || e.code().is_some_and(|c| {
            let code = c.code();
            code == "25006" || matches!(code.get(..2), Some("08" | "53" | "57"))
        })
}

/// The kind column's value.
pub(crate) fn kind_code(k: Kind) -> i16 {
    k as i16
}

/// A kind column back to a kind.
pub(crate) fn kind_of(code: i16, env: &str) -> Result<Kind, StoreError> {
    match code {
        1 => Ok(Kind::Flag),
        2 => Ok(Kind::Segment),
        _ => Err(corrupt(format!("an item kind in {env:?}"), std::io::Error::other(format!("kind {code}")))),
    }
}

/// The PostgreSQL backend. Cheap to clone (the pool is shared).
#[derive(Clone)]
pub(crate) struct PostgresBackend {
    pool: Pool,
    config: tokio_postgres::Config,
    /// TLS settings and connector shared by every connection (`tls.rs`).
    tls: tls::Connector,
}

impl std::fmt::Debug for PostgresBackend {
    /// Never prints the connection's password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresBackend")
            .field("hosts", &self.config.get_hosts())
            .field("dbname", &self.config.get_dbname())
            .finish_non_exhaustive()
    }
}

/// How one commit attempt failed.
enum Attempt {
    /// It did not happen, and retrying cannot change that.
    Definite(StoreError),
    /// The connection failed before COMMIT: it did not happen; try again.
    Retry(StoreError),
    /// The connection failed at COMMIT: it may or may not have happened.
    Ambiguous(StoreError),
}

/// Whether an error means the connection is gone (rather than a refusal
/// by the database).
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || e.code().is_none()
}

impl PostgresBackend {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`, with the libpq
    /// TLS parameters of `tls.rs`) and applies the schema migrations.
    pub(crate) async fn connect(
        url: &str,
        metrics: crate::metrics::Metrics,
    ) -> Result<PostgresBackend, StoreError> {
        let (mut config, settings) = tls::parse(url).map_err(|e| StoreError::Storage(Box::new(e)))?;
        if config.get_application_name().is_none() {
            config.application_name("flagstream-relay");
        }
        config.connect_timeout(Duration::from_secs(5));
        config.keepalives_idle(Duration::from_secs(10));
        tracing::info!(tls = %settings.describe(), checks = settings.checks(), "connecting to the PostgreSQL store");
        let tls = tls::Connector::new(settings, metrics).map_err(|e| StoreError::Storage(Box::new(e)))?;
        let manager = Manager::from_connect(
            config.clone(),
            tls::PoolConnect(tls.clone()),
            ManagerConfig { recycling_method: RecyclingMethod::Fast },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(Duration::from_secs(10)))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(db)?;
        let b = PostgresBackend { pool, config, tls };
        b.migrate().await?;
        Ok(b)
    }

    /// The connection settings (the feed opens its own session with them).
    pub(crate) fn config(&self) -> &tokio_postgres::Config {
        &self.config
    }

    /// The TLS connector every connection uses (the feed's too).
    pub(crate) fn tls(&self) -> &tls::Connector {
        &self.tls
    }

    /// One environment as stored (`None`: there is none of that name).
    pub(crate) async fn load_env(
        &self,
        name: &str,
        retention: Retention,
    ) -> Result<Option<Loaded>, StoreError> {
        let mut c = self.client().await?;
        let tx = c
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db)?;
        let Some(row) =
            tx.query_opt("SELECT * FROM flagstream_envs WHERE name = $1", &[&name]).await.map_err(db)?
        else {
            return Ok(None);
        };
        let meta = Self::meta_of(&row)?;
        let (items, log) = query::items_and_log(&tx, name, retention).await?;
        tx.commit().await.map_err(db)?;
        Ok(Some(Loaded { meta, items, log, audit_trimmed: 0 }))
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(db)
    }

    async fn migrate(&self) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK]).await.map_err(db)?;
        let result = async {
            // Only a database that still needs a migration needs CREATE:
            // on a migrated one, a role with table privileges suffices.
            let exists: bool = c
                .query_one("SELECT to_regclass('flagstream_migrations') IS NOT NULL", &[])
                .await
                .map_err(db)?
                .get(0);
            let current: i32 = match exists {
                false => 0,
                true => c
                    .query_one("SELECT coalesce(max(version), 0) FROM flagstream_migrations", &[])
                    .await
                    .map_err(db)?
                    .get(0),
            };
            if current as usize > MIGRATIONS.len() {
                return Err(StoreError::Storage(
                    format!(
                        "the database's schema is at version {current}; this relay knows versions up to {}: run a newer relay",
                        MIGRATIONS.len()
                    )
                    .into(),
                ));
            }
            if current == 0 {
                c.batch_execute(
                    "CREATE TABLE IF NOT EXISTS flagstream_migrations (
                         version integer PRIMARY KEY,
                         applied_at timestamptz NOT NULL DEFAULT now())",
                )
                .await
                .map_err(db)?;
            }
            for (i, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
                let version = i as i32 + 1;
                tracing::info!(version, "applying a schema migration");
                c.batch_execute(&format!(
                    "BEGIN; {sql}; INSERT INTO flagstream_migrations (version) VALUES ({version}); COMMIT;"
                ))
                .await
                .map_err(db)?;
            }
            Ok::<_, StoreError>(())
        }
        .await;
        // Unlocked whatever happened; the session also releases it.
        c.execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK]).await.map_err(db)?;
        result
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

    /// An environment's metadata from its row (the head's columns win over
    /// the copies in `meta`).
    fn meta_of(row: &tokio_postgres::Row) -> Result<EnvMeta, StoreError> {
        let name: String = row.get("name");
        let json: serde_json::Value = row.get("meta");
        let mut meta: EnvMeta =
            serde_json::from_value(json).map_err(|e| corrupt(format!("metadata of {name:?}"), e))?;
        meta.name = name;
        meta.epoch = row.get("epoch");
        meta.revision = row.get::<_, i64>("revision") as u64;
        meta.checksum = row.get::<_, i64>("checksum") as u64;
        meta.committed_unix_ms = row.get::<_, i64>("committed_unix_ms") as u64;
        meta.audit_head = row.get("audit_head");
        Ok(meta)
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
        for i in &c.items {
            h_kind.push(kind_code(i.key.0));
            h_key.push(i.key.1.clone());
            h_bytes.push(i.bytes.as_ref().map(|b| b.to_vec()));
            match &i.bytes {
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

#[async_trait]
impl Backend for PostgresBackend {
    async fn lock_for_write(&self, env: &str) -> Result<Option<Box<dyn WriteLock>>, StoreError> {
        match self.begin(env).await {
            Ok(locked) => Ok(Some(Box::new(PgWriteLock { backend: self.clone(), locked }))),
            Err(Attempt::Definite(e)) => Err(e),
            Err(Attempt::Retry(e) | Attempt::Ambiguous(e)) => {
                Err(StoreError::DatabaseUnavailable(Box::new(e)))
            }
        }
    }

    fn shared(&self) -> bool {
        true
    }

    async fn load(&self, retention: Retention) -> Result<Vec<Loaded>, StoreError> {
        let mut c = self.client().await?;
        // One consistent view of every environment.
        let tx = c
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()
            .await
            .map_err(db)?;
        let rows = tx.query("SELECT * FROM flagstream_envs ORDER BY name", &[]).await.map_err(db)?;
        let mut out = Vec::new();
        for row in rows {
            let meta = Self::meta_of(&row)?;
            let name = meta.name.clone();
            let (items, log) = query::items_and_log(&tx, &name, retention).await?;
            out.push(Loaded { meta, items, log, audit_trimmed: 0 });
        }
        tx.commit().await.map_err(db)?;
        Ok(out)
    }

    async fn create_env(&self, meta: EnvMeta, audit: Option<AuditRecord>) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let json = serde_json::to_value(&meta)
            .map_err(|e| corrupt("environment metadata (while encoding)".into(), e))?;
        let incarnation = query::incarnation(&c).await?;
        let tx = c.transaction().await.map_err(db)?;
        let inserted = tx
            .execute(
                "INSERT INTO flagstream_envs (name, meta, epoch, revision, checksum, committed_unix_ms, incarnation, audit_head)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (name) DO NOTHING",
                &[
                    &meta.name,
                    &json,
                    &meta.epoch,
                    &(meta.revision as i64),
                    &(meta.checksum as i64),
                    &(meta.committed_unix_ms as i64),
                    &incarnation,
                    &meta.audit_head,
                ],
            )
            .await
            .map_err(db)?;
        if inserted == 0 {
            return Err(StoreError::EnvExists(meta.name));
        }
        if let Some(rec) = &audit {
            insert_audit(&tx, &meta.name, rec).await?;
        }
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("env:{}", meta.name)])
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn delete_env(
        &self,
        name: String,
        archive: Option<(String, AuditRecord)>,
    ) -> Result<(), StoreError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(db)?;
        let row = tx
            .query_opt(
                "SELECT revision, audit_head FROM flagstream_envs WHERE name = $1 FOR UPDATE",
                &[&name],
            )
            .await
            .map_err(db)?
            .ok_or_else(|| StoreError::EnvNotFound(name.clone()))?;
        match archive {
            Some((id, mut rec)) => {
                let (revision, mut head) = (row.get::<_, i64>(0) as u64, row.get::<_, String>(1));
                audit::seal_onto(&mut rec, revision, &mut head)?;
                tx.execute("UPDATE flagstream_audit SET env = $2 WHERE env = $1", &[&name, &id])
                    .await
                    .map_err(db)?;
                insert_audit(&tx, &id, &rec).await?;
                tx.execute(
                    "INSERT INTO flagstream_audit_archives (name, revision, head) VALUES ($1, $2, $3)",
                    &[&id, &(revision as i64), &head],
                )
                .await
                .map_err(db)?;
            }
            None => {
                tx.execute("DELETE FROM flagstream_audit WHERE env = $1", &[&name]).await.map_err(db)?;
            }
        }
        tx.execute("DELETE FROM flagstream_envs WHERE name = $1", &[&name]).await.map_err(db)?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("env:{name}")]).await.map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    async fn append_relay_audit(&self, mut record: AuditRecord) -> Result<AuditRecord, StoreError> {
        let chain = audit::RELAY_CHAIN;
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(db)?;
        // Relays of one database append in turn: the head row is locked.
        tx.execute(
            "INSERT INTO flagstream_audit_archives (name, revision, head) VALUES ($1, 0, '') ON CONFLICT (name) DO NOTHING",
            &[&chain],
        )
        .await
        .map_err(db)?;
        let row = tx
            .query_one(
                "SELECT revision, head FROM flagstream_audit_archives WHERE name = $1 FOR UPDATE",
                &[&chain],
            )
            .await
            .map_err(db)?;
        let (revision, mut head) = (row.get::<_, i64>(0) as u64 + 1, row.get::<_, String>(1));
        audit::seal_onto(&mut record, revision, &mut head)?;
        insert_audit(&tx, chain, &record).await?;
        tx.execute(
            "UPDATE flagstream_audit_archives SET revision = $2, head = $3 WHERE name = $1",
            &[&chain, &(revision as i64), &head],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(record)
    }

    async fn archive_head(&self, archive: String) -> Result<Option<(u64, String)>, StoreError> {
        let c = self.client().await?;
        let row = c
            .query_opt("SELECT revision, head FROM flagstream_audit_archives WHERE name = $1", &[&archive])
            .await
            .map_err(db)?;
        Ok(row.map(|r| (r.get::<_, i64>(0) as u64, r.get(1))))
    }

    async fn update_meta(&self, current: EnvMeta, mut change: MetaChange) -> Result<EnvMeta, StoreError> {
        let mut c = self.client().await?;
        let tx = c.transaction().await.map_err(db)?;
        let row = tx
            .query_opt("SELECT * FROM flagstream_envs WHERE name = $1 FOR UPDATE", &[&current.name])
            .await
            .map_err(db)?
            .ok_or_else(|| StoreError::EnvNotFound(current.name.clone()))?;
        let mut meta = Self::meta_of(&row)?;
        let record = change(&mut meta)?;
        let json = serde_json::to_value(&meta)
            .map_err(|e| corrupt("environment metadata (while encoding)".into(), e))?;
        if let Some(rec) = &record {
            insert_audit(&tx, &meta.name, rec).await?;
        }
        tx.execute(
            "UPDATE flagstream_envs SET meta = $2, audit_head = $3 WHERE name = $1",
            &[&meta.name, &json, &meta.audit_head],
        )
        .await
        .map_err(db)?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("meta:{}", meta.name)])
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok(meta)
    }

    /// Only reached by a commit planned without the row lock; the write
    /// path commits through [`PgWriteLock`], and a replica (the other
    /// caller) never runs on PostgreSQL (config refuses it). One attempt,
    /// checked against the head under the lock.
    async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        let attempt = self.try_commit(&commit).await;
        self.outcome(&commit, attempt).await
    }

    async fn audit(
        &self,
        env: String,
        item: Option<(Kind, String)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
        let c = self.client().await?;
        let (rev, seq) = before.map_or((i64::MAX, i32::MAX), |(r, s)| {
            (r.min(i64::MAX as u64) as i64, s.min(i32::MAX as u32) as i32)
        });
        let (kind, key) = item.map_or((0i16, String::new()), |(k, n)| (kind_code(k), n));
        let rows = c
            .query(
                "SELECT revision, seq, record FROM flagstream_audit
                 WHERE env = $1 AND (revision, seq) < ($2, $3) AND ($4::smallint = 0 OR (kind = $4 AND key = $5))
                 ORDER BY revision DESC, seq DESC LIMIT $6",
                &[&env, &rev, &seq, &kind, &key, &(limit as i64)],
            )
            .await
            .map_err(db)?;
        rows.iter()
            .map(|r| {
                let rec: AuditRecord = serde_json::from_value(r.get(2))
                    .map_err(|e| corrupt(format!("audit log of {env:?}"), e))?;
                Ok(((r.get::<_, i64>(0) as u64, r.get::<_, i32>(1) as u32), rec))
            })
            .collect()
    }

    async fn audit_page(
        &self,
        env: String,
        after: Option<AuditPos>,
        upto: AuditPos,
        limit: usize,
    ) -> Result<AuditRows, StoreError> {
        let c = self.client().await?;
        let pos = |(r, s): AuditPos| (r.min(i64::MAX as u64) as i64, s.min(i32::MAX as u32) as i32);
        // Keyset pagination: one bounded page per call, never the whole log.
        let (after_rev, after_seq) = after.map_or((-1, -1), pos);
        let (upto_rev, upto_seq) = pos(upto);
        let rows = c
            .query(
                "SELECT revision, seq, record FROM flagstream_audit
                 WHERE env = $1 AND (revision, seq) > ($2, $3) AND (revision, seq) <= ($4, $5)
                 ORDER BY revision, seq LIMIT $6",
                &[&env, &after_rev, &after_seq, &upto_rev, &upto_seq, &(limit as i64)],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| {
                let pos = (r.get::<_, i64>(0) as u64, r.get::<_, i32>(1) as u32);
                (pos, serde_json::from_value::<AuditRecord>(r.get(2)).map_err(|e| e.to_string()))
            })
            .collect())
    }

    async fn last_actor(&self, env: String, kind: Kind, key: String) -> Option<String> {
        // Only enriches a conflict message: a failed read leaves it out.
        let c = self.client().await.ok()?;
        let row = c
            .query_opt(
                "SELECT record FROM flagstream_audit WHERE env = $1 AND kind = $2 AND key = $3 ORDER BY revision DESC, seq DESC LIMIT 1",
                &[&env, &kind_code(kind), &key],
            )
            .await
            .ok()??;
        let r: AuditRecord = serde_json::from_value(row.get(0)).ok()?;
        Some(format!("{} at revision {}", r.actor, r.revision))
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let c = self.client().await?;
        let rows =
            c.query("SELECT name, record FROM flagstream_tokens ORDER BY name", &[]).await.map_err(db)?;
        rows.iter()
            .map(|r| {
                let name: String = r.get(0);
                serde_json::from_value(r.get(1)).map_err(|e| corrupt(format!("token {name:?}"), e))
            })
            .collect()
    }

    async fn put_token(&self, token: TokenRecord) -> Result<(), StoreError> {
        let c = self.client().await?;
        let json = serde_json::to_value(&token).map_err(|e| corrupt("token (while encoding)".into(), e))?;
        c.execute(
            "INSERT INTO flagstream_tokens (name, record) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET record = EXCLUDED.record",
            &[&token.name, &json],
        )
        .await
        .map_err(db)?;
        c.execute("SELECT pg_notify($1, 'tokens')", &[&CHANNEL]).await.map_err(db)?;
        Ok(())
    }

    async fn insert_token(&self, token: TokenRecord) -> Result<bool, StoreError> {
        let c = self.client().await?;
        let json = serde_json::to_value(&token).map_err(|e| corrupt("token (while encoding)".into(), e))?;
        let n = c
            .execute(
                "INSERT INTO flagstream_tokens (name, record) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING",
                &[&token.name, &json],
            )
            .await
            .map_err(db)?;
        c.execute("SELECT pg_notify($1, 'tokens')", &[&CHANNEL]).await.map_err(db)?;
        Ok(n == 1)
    }

    async fn remove_token(&self, name: String) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute("DELETE FROM flagstream_tokens WHERE name = $1", &[&name]).await.map_err(db)?;
        c.execute("SELECT pg_notify($1, 'tokens')", &[&CHANNEL]).await.map_err(db)?;
        Ok(())
    }

    async fn revoke_token(&self, name: String) -> Result<Revoked, StoreError> {
        token::revoke(self, &name).await
    }

    async fn setting(&self, name: &'static str) -> Result<Option<String>, StoreError> {
        let c = self.client().await?;
        let row = c
            .query_opt("SELECT value FROM flagstream_settings WHERE name = $1", &[&name])
            .await
            .map_err(db)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn put_setting(&self, name: &'static str, value: String) -> Result<(), StoreError> {
        let c = self.client().await?;
        c.execute(
            "INSERT INTO flagstream_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
            &[&name, &value],
        )
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn flush(&self) -> Result<(), StoreError> {
        // Durable at every commit.
        Ok(())
    }
}

/// Inserts an access event's record into `env`'s audit log (or an
/// archive) at the next position of its revision, in `tx`.
async fn insert_audit(
    tx: &tokio_postgres::Transaction<'_>,
    env: &str,
    rec: &AuditRecord,
) -> Result<(), StoreError> {
    let json = serde_json::to_value(rec).map_err(|e| corrupt("audit record (while encoding)".into(), e))?;
    tx.execute(
        "INSERT INTO flagstream_audit (env, revision, seq, kind, key, record)
         SELECT $1, $2, coalesce(max(seq) + 1, 0), $3, $4, $5 FROM flagstream_audit WHERE env = $1 AND revision = $2",
        &[&env, &(rec.revision as i64), &rec.kind.map_or(0, kind_code), &rec.key, &json],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// The retained change log of `rows` (revision, commit id, commit time,
/// bytes, and each revision's changed keys), trimmed to the retention.
pub(crate) fn log_of(
    mut rows: Vec<(u64, String, u64, usize)>,
    mut changed: BTreeMap<u64, Vec<(Kind, String)>>,
    retention: Retention,
) -> Vec<LogEntry> {
    rows.sort_by_key(|r| r.0);
    let mut log: std::collections::VecDeque<LogEntry> = rows
        .into_iter()
        .map(|(revision, commit_id, committed_unix_ms, bytes)| LogEntry {
            revision,
            // A revision with no changed-item rows names no item: deltas
            // built across it carry nothing for it.
            changed: changed.remove(&revision).unwrap_or_default(),
            committed_unix_ms,
            bytes,
            diffed_from: None,
            commit_id,
        })
        .collect();
    trim_log(&mut log, retention);
    log.into()
}

/// The bytes of a `bytea` column.
pub(crate) fn bytes_of(v: Vec<u8>) -> Bytes {
    Bytes::from(v)
}
