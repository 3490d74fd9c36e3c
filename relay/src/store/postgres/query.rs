//! The reads (and the few maintenance writes) of the PostgreSQL backend
//! that the change feed, the pruner and the deployment-wide propagation
//! need, in the relay's terms.

use std::collections::BTreeMap;

use bytes::Bytes;
use tokio_postgres::{Client, Transaction};

use super::super::meta::EnvMeta;
use super::super::state::{ItemKey, Kind, Log};
use super::super::{Retention, StoreError};
use super::{CHANNEL, PostgresBackend, bytes_of, db, kind_of, log_of};

/// Advisory lock key of the pruner ("fspruner"): one relay at a time.
const PRUNE_LOCK: i64 = 0x6673_7072_756e_6572;

/// An environment's row: its head and incarnation.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    /// Epoch.
    pub epoch: String,
    /// Head revision.
    pub revision: u64,
    /// The database incarnation the epoch was made in.
    pub incarnation: String,
    /// The metadata (keys, description; head fields overlaid).
    pub meta: EnvMeta,
}

/// One committed revision from the history.
#[derive(Debug, Clone)]
pub(crate) struct Revision {
    /// The revision.
    pub revision: u64,
    /// Its commit id.
    pub commit_id: String,
    /// Commit time, Unix ms.
    pub committed_unix_ms: u64,
    /// Checksum of the environment after it.
    pub checksum: u64,
    /// The items it wrote (`None`: deleted), as they were after it.
    pub items: Vec<(Kind, String, Option<Bytes>)>,
}

/// Every item and the retained change log of `env`, in `tx`'s view.
pub(crate) async fn items_and_log(
    tx: &Transaction<'_>,
    env: &str,
    retention: Retention,
) -> Result<(BTreeMap<ItemKey, Bytes>, Log), StoreError> {
    let mut items = BTreeMap::new();
    for r in
        tx.query("SELECT kind, key, bytes FROM flagstream_items WHERE env = $1", &[&env]).await.map_err(db)?
    {
        items.insert((kind_of(r.get(0), env)?, r.get::<_, String>(1)), bytes_of(r.get(2)));
    }
    let limit = retention.revisions.min(i64::MAX as usize) as i64;
    let rows = tx
        .query(
            "SELECT revision, commit_id, committed_unix_ms, bytes FROM flagstream_history
             WHERE env = $1 ORDER BY revision DESC LIMIT $2",
            &[&env, &limit],
        )
        .await
        .map_err(db)?;
    let rows: Vec<(u64, String, u64, usize)> = rows
        .iter()
        .map(|r| {
            (r.get::<_, i64>(0) as u64, r.get(1), r.get::<_, i64>(2) as u64, r.get::<_, i64>(3) as usize)
        })
        .collect();
    let oldest = rows.iter().map(|r| r.0).min().unwrap_or(u64::MAX) as i64;
    let mut changed: BTreeMap<u64, Vec<(Kind, String)>> = BTreeMap::new();
    for r in tx
        .query(
            "SELECT revision, kind, key FROM flagstream_history_items WHERE env = $1 AND revision >= $2",
            &[&env, &oldest],
        )
        .await
        .map_err(db)?
    {
        changed.entry(r.get::<_, i64>(0) as u64).or_default().push((kind_of(r.get(1), env)?, r.get(2)));
    }
    Ok((items, log_of(rows, changed, retention)))
}

/// The database's incarnation: its system identifier and timeline. A
/// restore (new system, or point-in-time recovery) or a failover
/// (promotion) changes it; history committed in another incarnation may
/// be gone. On a primary the timeline is the one WAL is written on now
/// (a promoted standby's new timeline shows at once; the last
/// checkpoint's would lag until the next checkpoint); on a standby, the
/// one it replays. Every function used is executable by any role.
pub(crate) async fn incarnation(c: &Client) -> Result<String, StoreError> {
    let row = c
        .query_one(
            "SELECT (SELECT system_identifier::text FROM pg_control_system()),
                    CASE WHEN pg_is_in_recovery()
                         THEN (SELECT timeline_id FROM pg_control_checkpoint())::bigint
                         ELSE ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint
                    END::text",
            &[],
        )
        .await
        .map_err(db)?;
    Ok(format!("{}:{}", row.get::<_, String>(0), row.get::<_, String>(1)))
}

/// The names of every environment.
pub(crate) async fn env_names(c: &Client) -> Result<Vec<String>, StoreError> {
    Ok(c.query("SELECT name FROM flagstream_envs ORDER BY name", &[])
        .await
        .map_err(db)?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// One environment's head.
pub(crate) async fn head(c: &Client, env: &str) -> Result<Option<Head>, StoreError> {
    let Some(row) =
        c.query_opt("SELECT * FROM flagstream_envs WHERE name = $1", &[&env]).await.map_err(db)?
    else {
        return Ok(None);
    };
    Ok(Some(Head {
        epoch: row.get("epoch"),
        revision: row.get::<_, i64>("revision") as u64,
        incarnation: row.get("incarnation"),
        meta: PostgresBackend::meta_of(&row)?,
    }))
}

/// The commit id of `revision` of `env`, if the history still has it.
pub(crate) async fn commit_id(c: &Client, env: &str, revision: u64) -> Result<Option<String>, StoreError> {
    let row = c
        .query_opt(
            "SELECT commit_id FROM flagstream_history WHERE env = $1 AND revision = $2",
            &[&env, &(revision as i64)],
        )
        .await
        .map_err(db)?;
    Ok(row.map(|r| r.get(0)))
}

/// The oldest revision the history of `env` still holds (`None`: empty).
pub(crate) async fn oldest(c: &Client, env: &str) -> Result<Option<u64>, StoreError> {
    let row = c
        .query_one("SELECT min(revision) FROM flagstream_history WHERE env = $1", &[&env])
        .await
        .map_err(db)?;
    Ok(row.get::<_, Option<i64>>(0).map(|r| r as u64))
}

/// The revisions of `env` after `after`, up to `upto`, in order.
pub(crate) async fn history(
    c: &Client,
    env: &str,
    after: u64,
    upto: u64,
) -> Result<Vec<Revision>, StoreError> {
    let (a, u) = (after as i64, upto as i64);
    let rows = c
        .query(
            "SELECT revision, commit_id, committed_unix_ms, checksum FROM flagstream_history
             WHERE env = $1 AND revision > $2 AND revision <= $3 ORDER BY revision",
            &[&env, &a, &u],
        )
        .await
        .map_err(db)?;
    let mut out: Vec<Revision> = rows
        .iter()
        .map(|r| Revision {
            revision: r.get::<_, i64>(0) as u64,
            commit_id: r.get(1),
            committed_unix_ms: r.get::<_, i64>(2) as u64,
            checksum: r.get::<_, i64>(3) as u64,
            items: Vec::new(),
        })
        .collect();
    let items = c
        .query(
            "SELECT revision, kind, key, bytes FROM flagstream_history_items
             WHERE env = $1 AND revision > $2 AND revision <= $3 ORDER BY revision",
            &[&env, &a, &u],
        )
        .await
        .map_err(db)?;
    for r in items {
        let revision = r.get::<_, i64>(0) as u64;
        if let Some(rev) = out.iter_mut().find(|x| x.revision == revision) {
            rev.items.push((kind_of(r.get(1), env)?, r.get(2), r.get::<_, Option<Vec<u8>>>(3).map(bytes_of)));
        }
    }
    Ok(out)
}

/// The whole of `env` in one consistent view: its head and every item.
pub(crate) async fn full(
    c: &mut Client,
    env: &str,
) -> Result<Option<(Head, Vec<(Kind, Bytes)>)>, StoreError> {
    let tx = c
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(db)?;
    let Some(row) =
        tx.query_opt("SELECT * FROM flagstream_envs WHERE name = $1", &[&env]).await.map_err(db)?
    else {
        return Ok(None);
    };
    let h = Head {
        epoch: row.get("epoch"),
        revision: row.get::<_, i64>("revision") as u64,
        incarnation: row.get("incarnation"),
        meta: PostgresBackend::meta_of(&row)?,
    };
    let mut items = Vec::new();
    for r in tx.query("SELECT kind, bytes FROM flagstream_items WHERE env = $1", &[&env]).await.map_err(db)? {
        items.push((kind_of(r.get(0), env)?, bytes_of(r.get(1))));
    }
    tx.commit().await.map_err(db)?;
    Ok(Some((h, items)))
}

/// Makes a new epoch for `env` if it is still at `old` (the first relay to
/// detect lost history wins), dropping the history of the old one; then
/// every relay reloads it. Whether this call made it.
pub(crate) async fn rotate_epoch(
    c: &mut Client,
    env: &str,
    old: &str,
    new: &str,
    incarnation: &str,
) -> Result<bool, StoreError> {
    let tx = c.transaction().await.map_err(db)?;
    let n = tx
        .execute(
            "UPDATE flagstream_envs SET epoch = $3, incarnation = $4 WHERE name = $1 AND epoch = $2",
            &[&env, &old, &new, &incarnation],
        )
        .await
        .map_err(db)?;
    if n == 1 {
        tx.execute("DELETE FROM flagstream_history WHERE env = $1", &[&env]).await.map_err(db)?;
        tx.execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &format!("env:{env}")]).await.map_err(db)?;
    }
    tx.commit().await.map_err(db)?;
    Ok(n == 1)
}

/// What one pruning pass removed.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Pruned {
    /// History revisions.
    pub revisions: u64,
    /// Audit records.
    pub audit: u64,
    /// Request ids older than a day.
    pub requests: u64,
}

/// Drops history beyond the retention (the newest `revisions` whose
/// entries fit `bytes`, at least one), audit records beyond
/// `audit_revisions`, and old request ids — if no other relay is pruning
/// (`None` then).
pub(crate) async fn prune(c: &Client, retention: Retention) -> Result<Option<Pruned>, StoreError> {
    let locked: bool =
        c.query_one("SELECT pg_try_advisory_lock($1)", &[&PRUNE_LOCK]).await.map_err(db)?.get(0);
    if !locked {
        return Ok(None);
    }
    let result = async {
        let mut p = Pruned::default();
        let revisions = retention.revisions.min(i64::MAX as usize) as i64;
        let bytes = retention.bytes.min(i64::MAX as usize) as i64;
        // Per environment, the newest revisions while count and summed
        // bytes are within the retention (always the newest one).
        p.revisions = c
            .execute(
                "DELETE FROM flagstream_history h USING (
                     SELECT env, revision, row_number() OVER w AS n, (sum(bytes) OVER w)::bigint AS total
                     FROM flagstream_history WINDOW w AS (PARTITION BY env ORDER BY revision DESC)
                 ) k
                 WHERE h.env = k.env AND h.revision = k.revision AND k.n > 1 AND (k.n > $1 OR k.total > $2)",
                &[&revisions, &bytes],
            )
            .await
            .map_err(db)?;
        let audit = retention.audit_revisions.min(i64::MAX as usize) as i64;
        p.audit = c
            .execute(
                "DELETE FROM flagstream_audit a USING flagstream_envs e
                 WHERE a.env = e.name AND a.revision <= e.revision - $1",
                &[&audit],
            )
            .await
            .map_err(db)?;
        p.requests = c
            .execute("DELETE FROM flagstream_requests WHERE at < now() - interval '1 day'", &[])
            .await
            .map_err(db)?;
        Ok::<_, StoreError>(p)
    }
    .await;
    c.execute("SELECT pg_advisory_unlock($1)", &[&PRUNE_LOCK]).await.map_err(db)?;
    result.map(Some)
}

/// Stores this relay's propagation report for `env`.
pub(crate) async fn publish_report(
    c: &Client,
    relay: &str,
    env: &str,
    epoch: &str,
    report: &[u8],
) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO flagstream_relays (relay, env, epoch, report, updated_at) VALUES ($1, $2, $3, $4, now())
         ON CONFLICT (relay, env) DO UPDATE SET epoch = EXCLUDED.epoch, report = EXCLUDED.report, updated_at = now()",
        &[&relay, &env, &epoch, &report],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// The other relays' reports updated in the last `fresh_secs` seconds:
/// `(relay, env, epoch, report bytes)`. Older ones (a relay that stopped)
/// are deleted once a minute old.
pub(crate) async fn peer_reports(
    c: &Client,
    relay: &str,
    fresh_secs: f64,
) -> Result<Vec<(String, String, String, Vec<u8>)>, StoreError> {
    c.execute("DELETE FROM flagstream_relays WHERE updated_at < now() - interval '1 minute'", &[])
        .await
        .map_err(db)?;
    let rows = c
        .query(
            "SELECT relay, env, epoch, report FROM flagstream_relays
             WHERE relay <> $1 AND updated_at > now() - make_interval(secs => $2)",
            &[&relay, &fresh_secs],
        )
        .await
        .map_err(db)?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1), r.get(2), r.get(3))).collect())
}

/// One usage row (`flagstream_usage`).
#[derive(Debug)]
pub(crate) struct UsageRow {
    pub writer: String,
    pub seq: i64,
    pub node: String,
    pub env: String,
    pub summary: Vec<u8>,
    /// When it was written, the database's Unix ms (0 in a row to write).
    pub created_ms: i64,
}

/// The database's clock, Unix ms.
pub(crate) async fn now_ms(c: &Client) -> Result<i64, StoreError> {
    let row = c.query_one("SELECT (extract(epoch FROM now()) * 1000)::bigint", &[]).await.map_err(db)?;
    Ok(row.get(0))
}

/// Stores a usage summary this relay passes to the others.
pub(crate) async fn publish_usage(c: &Client, process: &str, row: &UsageRow) -> Result<(), StoreError> {
    c.execute(
        "INSERT INTO flagstream_usage (process, writer, seq, node, env, summary) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&process, &row.writer, &row.seq, &row.node, &row.env, &row.summary],
    )
    .await
    .map_err(db)?;
    Ok(())
}

/// Deletes usage rows over an hour old.
pub(crate) async fn prune_usage(c: &Client) -> Result<(), StoreError> {
    c.execute("DELETE FROM flagstream_usage WHERE created_at < now() - interval '1 hour'", &[])
        .await
        .map_err(db)?;
    Ok(())
}

/// Other processes' usage rows this relay has not taken: of each writer in
/// `taken` (writer, last `seq` taken) those after it, of every other writer
/// all; at most `limit`, each writer's in order.
pub(crate) async fn peer_usage(
    c: &Client,
    process: &str,
    taken: &[(String, i64)],
    limit: i64,
) -> Result<Vec<UsageRow>, StoreError> {
    let (writers, seqs): (Vec<&str>, Vec<i64>) = taken.iter().map(|(w, s)| (w.as_str(), *s)).unzip();
    let rows = c
        .query(
            "SELECT u.writer, u.seq, u.node, u.env, u.summary, (extract(epoch FROM u.created_at) * 1000)::bigint
             FROM flagstream_usage u
             LEFT JOIN unnest($2::text[], $3::bigint[]) AS t(writer, seq) ON t.writer = u.writer
             WHERE u.process <> $1 AND u.seq > coalesce(t.seq, 0)
             ORDER BY u.writer, u.seq LIMIT $4",
            &[&process, &writers, &seqs, &limit],
        )
        .await
        .map_err(db)?;
    Ok(rows
        .iter()
        .map(|r| UsageRow {
            writer: r.get(0),
            seq: r.get(1),
            node: r.get(2),
            env: r.get(3),
            summary: r.get(4),
            created_ms: r.get(5),
        })
        .collect())
}

/// The fraction (0–1) of the server's NOTIFY queue in use: a session that
/// LISTENs and never reads fills it, and at 1 every commit that notifies
/// fails.
pub(crate) async fn notification_queue_usage(c: &Client) -> Result<f64, StoreError> {
    Ok(c.query_one("SELECT pg_notification_queue_usage()", &[]).await.map_err(db)?.get(0))
}
