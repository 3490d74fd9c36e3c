//! Usage passed between the relays of a shared database (PROTOCOL.md
//! "Usage summaries"): every `usage-share-interval` this relay writes what
//! its own subscribers (SDKs and replicas) reported since its last turn
//! (its usage outbox) into `flagstream_usage`, and takes the rows the
//! other relays wrote, each once. So every relay of the database answers
//! `GetUsage` for all of them, and a relay that starts takes the last hour
//! the others passed on (rows are deleted after an hour).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use flagstream_proto::v1 as pb;
use prost::Message;
use tokio_util::sync::CancellationToken;

use super::{Feed, QUERY_TIMEOUT, next_turn};
use crate::store::StoreError;
use crate::store::postgres::query;

/// Rows read per query (each at most 512 KiB: a page at most 8 MiB); a
/// turn reads pages until one comes back short.
const PAGE: i64 = 16;

/// A relay whose last row was taken this long ago is forgotten: the
/// database deletes rows after an hour, so none of its rows is left to
/// take twice.
const FORGET: Duration = Duration::from_secs(2 * 3600);

/// Which rows of the others this relay has taken: per writing relay, the
/// last `seq` and when it was taken. A relay writes its rows one after
/// the other, each after the previous one committed, so everything up to
/// the last `seq` taken has been seen.
#[derive(Debug, Default)]
struct Cursor {
    taken: HashMap<String, (i64, tokio::time::Instant)>,
}

impl Cursor {
    fn took(&mut self, relay: &str, seq: i64) {
        let now = tokio::time::Instant::now();
        match self.taken.get_mut(relay) {
            Some(t) => *t = (t.0.max(seq), now),
            None => {
                self.taken.insert(relay.to_owned(), (seq, now));
            }
        }
    }

    /// The relays to skip rows of, with their last `seq`; relays not heard
    /// from for [`FORGET`] are dropped first (bounded by the relays that
    /// wrote within two hours).
    fn positions(&mut self) -> Vec<(String, i64)> {
        self.taken.retain(|_, (_, at)| at.elapsed() < FORGET);
        self.taken.iter().map(|(r, (s, _))| (r.clone(), *s)).collect()
    }
}

impl Feed {
    /// Every `every` while the session is up, until `stop`: one exchange,
    /// given up after [`QUERY_TIMEOUT`]. Best effort, like the reports:
    /// usage is diagnostic.
    pub(super) async fn share_usage(self: Arc<Self>, every: Duration, stop: CancellationToken) {
        let mut cursor = Cursor::default();
        // This relay's rows are numbered from 1 (its id is new per start).
        let mut seq = 0i64;
        let (mut up, mut first) = (self.up.subscribe(), true);
        while next_turn(&mut up, &mut first, every, &stop).await {
            let c = match self.db.client().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "passing usage to the other relays failed");
                    continue;
                }
            };
            match tokio::time::timeout(QUERY_TIMEOUT, self.exchange_usage(&c, &mut seq, &mut cursor)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "passing usage to the other relays failed")
                }
                Err(_) => {
                    // Its query may still wait on the server: the connection
                    // is closed (an insert in flight rolls back).
                    drop(deadpool_postgres::Object::take(c));
                    self.store.metrics().limit_hit("feed_step_timeout");
                    tracing::warn!(
                        "passing usage to the other relays took over {QUERY_TIMEOUT:?}; given up, the next turn tries again"
                    );
                }
            }
        }
    }

    /// Writes this relay's outbox of every environment (rows `seq + 1`,
    /// ...), then takes the other relays' rows it has not taken yet.
    async fn exchange_usage(
        &self,
        c: &tokio_postgres::Client,
        seq: &mut i64,
        cursor: &mut Cursor,
    ) -> Result<(), StoreError> {
        for env in self.store.envs() {
            let name = env.meta.load().name.clone();
            let summaries = self.hub.usage.forward(&name);
            for (i, s) in summaries.iter().enumerate() {
                *seq += 1;
                if let Err(e) = query::publish_usage(c, &self.relay_id, *seq, &name, &s.encode_to_vec()).await
                {
                    // Taken out of the outbox: these counts stay in this
                    // relay's own view only.
                    tracing::warn!(env = %name, summaries = summaries.len() - i, "usage not passed to the other relays (kept here only)");
                    return Err(e);
                }
            }
        }
        loop {
            let rows = query::peer_usage(c, &self.relay_id, &cursor.positions(), PAGE).await?;
            let short = (rows.len() as i64) < PAGE;
            for (relay, n, env, bytes) in rows {
                cursor.took(&relay, n);
                self.take(&env, &relay, &bytes);
            }
            if short {
                return Ok(());
            }
        }
    }

    /// Adds one row of another relay, checked as an SDK's summary is.
    fn take(&self, env: &str, relay: &str, bytes: &[u8]) {
        // An environment deleted (or not loaded here yet) since: dropped.
        let Ok(e) = self.store.env(env) else { return };
        let summary = match pb::UsageSummary::decode(bytes) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(env, relay, error = %e, "another relay's usage row does not decode; skipped");
                return;
            }
        };
        match crate::usage::check(&summary) {
            Ok(()) => self.hub.usage.ingest_peer(env, relay, &e.state.load().snapshot, summary),
            Err(over) => {
                self.hub.usage.refused(over.field);
                tracing::warn!(
                    env,
                    relay,
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
