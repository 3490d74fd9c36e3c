//! The PostgreSQL backend: every relay of a deployment is a writer on one
//! database, and all follow its change feed (`crate::cluster::feed`).
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

mod commit;
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
use super::state::{Kind, Log, LogEntry};
use super::{Retention, StoreError, corrupt, trim_log};
use crate::store::token::TokenRecord;

/// The notification channel every relay LISTENs on. Payloads:
/// `rev:ENV:REVISION`, `meta:ENV`, `env:ENV`, `tokens`.
pub(crate) const CHANNEL: &str = "flagstream";

/// Advisory lock key of schema migrations ("flagstrm" in ASCII).
const MIGRATION_LOCK: i64 = 0x666c_6167_7374_726d;

/// The migrations, in order; version = index + 1.
const MIGRATIONS: &[&str] = &[
    include_str!("postgres/schema.sql"),
    include_str!("postgres/schema-2.sql"),
    include_str!("postgres/schema-3.sql"),
];

/// Connections in the pool (writes, reads, the pruner); the feed's
/// listening session is separate.
const POOL_SIZE: usize = 8;

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

/// Whether an error means the connection is gone (rather than a refusal
/// by the database).
pub(super) fn connection_lost(e: &tokio_postgres::Error) -> bool {
    e.is_closed() || e.code().is_none()
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

impl PostgresBackend {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`, with the libpq
    /// TLS parameters of `tls.rs`) and applies the schema migrations.
    pub(crate) async fn connect(
        url: &str,
        metrics: crate::ops::metrics::Metrics,
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

#[async_trait]
impl Backend for PostgresBackend {
    async fn lock_for_write(&self, env: &str) -> Result<Option<Box<dyn WriteLock>>, StoreError> {
        self.lock_env(env).await.map(Some)
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
        self.commit_once(&commit).await
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
) -> Log {
    rows.sort_by_key(|r| r.0);
    let mut log: Log = rows
        .into_iter()
        .map(|(revision, commit_id, committed_unix_ms, bytes)| {
            std::sync::Arc::new(LogEntry {
                revision,
                // A revision with no changed-item rows names no item: deltas
                // built across it carry nothing for it.
                changed: changed.remove(&revision).unwrap_or_default(), // no rows: no item
                committed_unix_ms,
                bytes,
                diffed_from: None,
                commit_id,
            })
        })
        .collect();
    trim_log(&mut log, retention);
    log
}

/// The bytes of a `bytea` column.
pub(crate) fn bytes_of(v: Vec<u8>) -> Bytes {
    Bytes::from(v)
}
