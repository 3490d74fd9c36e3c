//! Usage passed between the relays of a shared database (PROTOCOL.md
//! "Usage summaries"): every `usage-share-interval` this relay writes what
//! its own subscribers (SDKs and replicas) reported since its last turn
//! (its usage outbox) into `flagstream_usage`, and takes the rows the
//! other relays wrote, each once. So every relay of the database answers
//! `GetUsage` for all of them, and a relay that starts takes the last hour
//! the relays passed on (rows are deleted after an hour): into its view,
//! not into its metrics, and an earlier process of its own counts no SDK
//! instances (they are this process's now).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use prost::Message;
use tokio_util::sync::CancellationToken;

use super::{Feed, QUERY_TIMEOUT, next_turn};
use crate::store::StoreError;
use crate::store::postgres::query;
use crate::usage::PeerRow;

/// Rows read per query (each at most 512 KiB: a page at most 8 MiB); a
/// turn reads pages until one comes back short.
const PAGE: i64 = 16;

/// A writer whose last row was taken this long ago is forgotten: the
/// database deletes rows after an hour, so none of its rows is left to
/// take twice.
const FORGET: Duration = Duration::from_secs(2 * 3600);

/// Which rows of the others this relay has taken: per writer, the last
/// `seq` and when it was taken. A writer inserts its rows one after the
/// other, each once the previous one committed (and after one it could not
/// confirm, the process writes on as a new writer), so every row of a
/// writer up to the last `seq` taken has been seen.
#[derive(Debug, Default)]
struct Cursor {
    taken: HashMap<String, (i64, tokio::time::Instant)>,
}

impl Cursor {
    fn took(&mut self, writer: &str, seq: i64) {
        let now = tokio::time::Instant::now();
        match self.taken.get_mut(writer) {
            Some(t) => *t = (t.0.max(seq), now),
            None => {
                self.taken.insert(writer.to_owned(), (seq, now));
            }
        }
    }

    /// The writers to skip rows of, with their last `seq`; writers not
    /// heard from for [`FORGET`] are dropped first (bounded by the writers
    /// of the last two hours).
    fn positions(&mut self) -> Vec<(String, i64)> {
        self.taken.retain(|_, (_, at)| at.elapsed() < FORGET);
        self.taken.iter().map(|(r, (s, _))| (r.clone(), *s)).collect()
    }
}

/// This process's writing state: rows are `writer` = `process.generation`,
/// numbered from 1; after a row it could not confirm, a new generation.
#[derive(Debug)]
struct Writer {
    generation: u64,
    seq: i64,
}

impl Writer {
    fn id(&self, process: &str) -> String {
        format!("{process}.{}", self.generation)
    }

    /// A row may have been left uncommitted or committed late: go on as a
    /// new writer, so no reader's cursor can have passed that row.
    fn renew(&mut self) {
        self.generation += 1;
        self.seq = 0;
    }
}

/// How long the last usage turn at shutdown may take, connection included.
const LAST_TURN: Duration = Duration::from_secs(3);

impl Feed {
    /// Every `every` while the session is up, until `stop`: one exchange,
    /// given up after [`QUERY_TIMEOUT`]. Best effort, like the reports:
    /// usage is diagnostic. At `stop`, one last turn (bounded by
    /// [`LAST_TURN`], so shutdown is not held by a database that stopped
    /// answering) passes on what this relay's SDKs reported since the
    /// previous one.
    pub(super) async fn share_usage(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let mut cursor = Cursor::default();
        let mut writer = Writer { generation: 0, seq: 0 };
        // When this process first reached the database, by its clock: rows
        // written before are the backlog (kept out of the metrics).
        let mut started_ms: Option<i64> = None;
        let (mut up, mut first) = (self.up.subscribe(), true);
        loop {
            let last = !next_turn(&mut up, &mut first, every, &stop).await;
            // Stopping: one last turn passes on what came since the previous
            // one (the SDKs' final counts), if the database is there.
            if last && !*self.up.borrow() {
                return;
            }
            let limit = if last { LAST_TURN } else { QUERY_TIMEOUT };
            let c = match tokio::time::timeout(limit, self.db.client()).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "passing usage to the other relays failed");
                    if last {
                        return;
                    }
                    continue;
                }
                Err(_) => {
                    tracing::warn!(
                        "passing usage to the other relays failed: no database connection within {limit:?}"
                    );
                    if last {
                        return;
                    }
                    continue;
                }
            };
            let turn = self.exchange_usage(&c, &mut writer, &mut cursor, &mut started_ms);
            match tokio::time::timeout(limit, turn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    writer.renew();
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "passing usage to the other relays failed")
                }
                Err(_) => {
                    // Its query may still wait on the server (and an insert
                    // may still commit): the connection is not reused, and
                    // this relay writes on as a new writer.
                    drop(deadpool_postgres::Object::take(c));
                    writer.renew();
                    self.store.metrics().limit_hit("feed_step_timeout");
                    tracing::warn!(
                        "passing usage to the other relays took over {limit:?}; given up, the next turn tries again"
                    );
                }
            }
            if last {
                tracing::info!("stopping: the last usage turn is over");
                return;
            }
        }
    }

    /// Writes this relay's outbox of every environment, then takes the
    /// other processes' rows it has not taken yet (those written before
    /// `started_ms`, read from the database on the first turn, as backlog).
    async fn exchange_usage(
        &self,
        c: &tokio_postgres::Client,
        writer: &mut Writer,
        cursor: &mut Cursor,
        started_ms: &mut Option<i64>,
    ) -> Result<(), StoreError> {
        let started = match *started_ms {
            Some(t) => t,
            None => *started_ms.insert(query::now_ms(c).await?),
        };
        let node = self.usage.node.clone();
        for env in self.store.envs() {
            let name = env.meta.load().name.clone();
            let summaries = self.hub.usage.forward(&name);
            for (i, s) in summaries.iter().enumerate() {
                writer.seq += 1;
                let row = query::UsageRow {
                    writer: writer.id(&self.relay_id),
                    seq: writer.seq,
                    node: node.clone(),
                    env: name.clone(),
                    summary: s.encode_to_vec(),
                    created_ms: 0,
                };
                if let Err(e) = query::publish_usage(c, &self.relay_id, &row).await {
                    // Taken out of the outbox: these counts stay in this
                    // relay's own view only.
                    tracing::warn!(env = %name, summaries = summaries.len() - i, "usage not passed to the other relays (kept here only)");
                    return Err(e);
                }
            }
        }
        query::prune_usage(c).await?;
        loop {
            let rows = query::peer_usage(c, &self.relay_id, &cursor.positions(), PAGE).await?;
            let short = (rows.len() as i64) < PAGE;
            for row in rows {
                cursor.took(&row.writer, row.seq);
                let peer = PeerRow { own: row.node == node, backlog: row.created_ms < started };
                self.take(&row, peer);
            }
            if short {
                return Ok(());
            }
        }
    }

    /// Adds one row of another process, checked as an SDK's summary is.
    fn take(&self, row: &query::UsageRow, peer: PeerRow) {
        let (env, writer) = (row.env.as_str(), row.writer.as_str());
        // An environment deleted (or not loaded here yet) since: dropped.
        let Ok(e) = self.store.env(env) else { return };
        let summary = match pb::UsageSummary::decode(row.summary.as_slice()) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(env, writer, error = %e, "another relay's usage row does not decode; skipped");
                return;
            }
        };
        match crate::usage::check(&summary) {
            Ok(()) => self.hub.usage.ingest_peer(
                &e.deleted,
                env,
                &row.node,
                peer,
                &e.state.load().snapshot,
                summary,
            ),
            Err(over) => {
                self.hub.usage.refused(over.field);
                tracing::warn!(
                    env,
                    writer,
                    field = over.field,
                    "another relay's usage row refused: {}",
                    over.message
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The last row taken of each relay is kept; a relay silent for
    /// [`FORGET`] (its rows long deleted) is forgotten.
    #[tokio::test(start_paused = true)]
    async fn the_cursor_keeps_each_relays_last_row_until_forgotten() {
        let mut c = Cursor::default();
        c.took("a", 2);
        c.took("a", 1);
        c.took("b", 7);
        let mut p = c.positions();
        p.sort();
        assert_eq!(p, [("a".to_owned(), 2), ("b".to_owned(), 7)]);
        tokio::time::advance(FORGET / 2).await;
        c.took("b", 8);
        tokio::time::advance(FORGET / 2).await;
        assert_eq!(c.positions(), [("b".to_owned(), 8)]);
    }
}
