//! Catching an environment up from the database's history: by delta,
//! revision by revision, checksum-verified; a full reload when the history
//! no longer reaches back; a new epoch (compare-and-set, the first relay to
//! notice wins) when the relay's own evidence shows the history was lost.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flagstream::follow::{RawChunk, RawDelta};

use super::{Feed, PER_REVISION};
use crate::store::postgres::query::{self, Revision};
use crate::store::state::Kind;
use crate::store::{CatchUpOutcome, Env, StoreError, now_ms};

impl Feed {
    /// Every environment, the tokens.
    pub(super) async fn catch_up_all(&self) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        let names = query::env_names(&c).await?;
        drop(c);
        for env in self.store.envs() {
            let name = env.meta.load().name.clone();
            if !names.contains(&name) {
                tracing::info!(env = %name, "environment deleted by another relay");
                self.store.unregister_env(&name).await;
                self.unverified.lock().unwrap_or_else(|p| p.into_inner()).remove(&name);
            }
        }
        for name in &names {
            self.catch_up(name).await?;
        }
        self.reload_tokens().await
    }

    /// Brings one environment to the database's head.
    pub(super) async fn catch_up(&self, name: &str) -> Result<(), StoreError> {
        let Ok(env) = self.store.env(name) else {
            if let Some(loaded) = self.db.load_env(name, self.store.retention()).await? {
                tracing::info!(env = %name, "environment created by another relay");
                // Loading verified its checksum.
                let env = self.store.register_env(loaded).await?;
                self.verified(&env, name);
            }
            return Ok(());
        };
        // The head is read under the environment's write lock: a write of
        // this relay's own cannot land between the read and the compare.
        let _write = env.write.lock().await;
        self.catch_up_locked(&env, name, false).await.map(|_| ())
    }

    /// [`Feed::catch_up`] with the environment's write lock held by the
    /// caller (a write that holds it and found the database ahead).
    ///
    /// With `row_locked` the caller also holds the environment's row: a
    /// new epoch is then left to a call without it
    /// ([`CatchUpOutcome::NeedsRowUnlocked`]).
    pub(super) async fn catch_up_locked(
        &self,
        env: &Arc<Env>,
        name: &str,
        row_locked: bool,
    ) -> Result<CatchUpOutcome, StoreError> {
        let c = self.db.client().await?;
        let Some(head) = query::head(&c, name).await? else {
            // Deleted by another relay: the next full catch-up (which takes
            // no lock first) removes it here.
            self.store.kick_feed();
            return Ok(CatchUpOutcome::Done);
        };
        for id in self.store.replace_meta(env, head.meta.clone()) {
            self.hub.end_key(name, &id, "was revoked or expired");
        }
        let state = env.state.load_full();
        let mut incarnation = self.incarnation();
        if !head.incarnation.is_empty() && head.incarnation != incarnation {
            // Ours may be stale (read when the feed last connected, and a
            // failover since): ask again before ending an epoch over it.
            incarnation = query::incarnation(&c).await?;
            *self.incarnation.lock().unwrap_or_else(|p| p.into_inner()) = incarnation.clone();
        }
        let lost =
            if !incarnation.is_empty() && !head.incarnation.is_empty() && head.incarnation != incarnation {
                Some(format!("the database is another incarnation ({} → {})", head.incarnation, incarnation))
            } else if head.epoch != state.epoch {
                None
            } else if head.revision < state.revision {
                Some(format!(
                    "the database is at revision {}, this relay served {}",
                    head.revision, state.revision
                ))
            } else if let Some(ours) =
                state.log.back().filter(|e| e.revision == state.revision && !e.commit_id.is_empty())
            {
                match query::commit_id(&c, name, state.revision).await? {
                    Some(theirs) if theirs != ours.commit_id => Some(format!(
                        "revision {} in the database is not the one this relay served",
                        state.revision
                    )),
                    _ => None,
                }
            } else {
                None
            };
        if let Some(why) = lost {
            if row_locked {
                return Ok(CatchUpOutcome::NeedsRowUnlocked);
            }
            return self.new_epoch(env, &head, &why).await.map(|()| CatchUpOutcome::Done);
        }
        if head.epoch != state.epoch {
            tracing::info!(env = %name, epoch = %head.epoch, "environment has a new epoch: reloading");
            return self.reload(env).await.map(|()| CatchUpOutcome::Done);
        }
        if head.revision == state.revision {
            self.store.set_audit_head(env, &head.meta.audit_head);
            self.verified(env, name);
            return Ok(CatchUpOutcome::Done);
        }
        let oldest = query::oldest(&c, name).await?;
        if oldest.is_none_or(|o| o > state.revision + 1) {
            // The history no longer reaches back to our head.
            return self.reload(env).await.map(|()| CatchUpOutcome::Done);
        }
        let revisions = query::history(&c, name, state.revision, head.revision).await?;
        drop(c);
        if revisions.first().is_none_or(|r| r.revision != state.revision + 1) {
            return self.reload(env).await.map(|()| CatchUpOutcome::Done);
        }
        let batches: Vec<Vec<Revision>> = if revisions.len() > PER_REVISION {
            vec![revisions]
        } else {
            revisions.into_iter().map(|r| vec![r]).collect()
        };
        for batch in batches {
            if let Err(e) = self.apply(env, batch).await {
                tracing::warn!(env = %name, error = %flagstream::follow::error_chain(&e), "a revision from the database did not apply; reloading the environment");
                self.store.metrics().limit_hit("feed_resync");
                return self.reload(env).await.map(|()| CatchUpOutcome::Done);
            }
        }
        // The audit chain's head at the revision reached (another relay
        // sealed its records).
        self.store.set_audit_head(env, &head.meta.audit_head);
        self.verified(env, name);
        Ok(CatchUpOutcome::Done)
    }

    /// Applies `revisions` (one, or several coalesced) as one delta.
    pub(super) async fn apply(
        &self,
        env: &Arc<Env>,
        revisions: Vec<Revision>,
    ) -> Result<(), flagstream::ApplyError> {
        let state = env.state.load();
        let (epoch, from) = (state.epoch.clone(), state.revision);
        drop(state);
        let last = revisions.last().cloned().expect("a batch holds a revision");
        let mut latest: BTreeMap<(Kind, String), Option<Bytes>> = BTreeMap::new();
        for r in revisions {
            for (kind, key, bytes) in r.items {
                latest.insert((kind, key), bytes);
            }
        }
        let mut d = RawDelta {
            epoch,
            from_revision: from,
            to_revision: last.revision,
            checksum: last.checksum,
            committed_unix_ms: last.committed_unix_ms,
            ..RawDelta::default()
        };
        for ((kind, key), bytes) in latest {
            match (kind, bytes) {
                (Kind::Flag, Some(b)) => d.upserted_flags.push(b),
                (Kind::Segment, Some(b)) => d.upserted_segments.push(b),
                (Kind::Flag, None) => d.deleted_flag_keys.push(key),
                (Kind::Segment, None) => d.deleted_segment_keys.push(key),
            }
        }
        // One change-feed step as a span an operator (or an OTLP collector)
        // follows: which environment, from and to which revision, how long
        // after the other relay's commit it was applied here.
        let span = tracing::info_span!(
            "feed_step",
            env = %env.meta.load().name,
            from = d.from_revision,
            to = d.to_revision,
            lag_ms = tracing::field::Empty,
        );
        // Tracked by the store: a shutdown that drops this step waits for
        // the apply (already on the blocking pool) before its last flush.
        let (store, env, applying) = (self.store.clone(), env.clone(), span.clone());
        let apply = tokio::task::spawn_blocking(move || {
            applying.in_scope(|| store.receive_delta(&env, d, false, last.commit_id))
        });
        self.store
            .track(apply)
            .await
            .map_err(|e| flagstream::ApplyError::Protocol(format!("applying failed: {e}")))?
            .map_err(|e| flagstream::ApplyError::Protocol(format!("applying failed: {e}")))??;
        let lag_ms = now_ms().saturating_sub(last.committed_unix_ms);
        span.record("lag_ms", lag_ms);
        span.in_scope(|| tracing::debug!("applied from the change feed"));
        self.store.metrics().feed_lag.observe(lag_ms as f64 / 1000.0);
        Ok(())
    }

    /// Replaces the environment with the database's whole current state
    /// (a new epoch, or history that no longer reaches our head).
    pub(super) async fn reload(&self, env: &Arc<Env>) -> Result<(), StoreError> {
        let name = env.meta.load().name.clone();
        let mut c = self.db.client().await?;
        let Some((head, items)) = query::full(&mut c, &name).await? else {
            return Ok(());
        };
        drop(c);
        let mut chunk = RawChunk {
            epoch: head.epoch.clone(),
            revision: head.revision,
            chunk_index: 0,
            total_chunks: 1,
            last_chunk: true,
            checksum: head.meta.checksum,
            environment: name.clone(),
            committed_unix_ms: head.meta.committed_unix_ms,
            ..RawChunk::default()
        };
        for (kind, bytes) in items {
            match kind {
                Kind::Flag => chunk.flags.push(bytes),
                Kind::Segment => chunk.segments.push(bytes),
            }
        }
        let (store, e) = (self.store.clone(), env.clone());
        // Tracked by the store, as a delta's apply above.
        let apply = tokio::task::spawn_blocking(move || {
            store.receive_snapshot(&e, vec![chunk], false, String::new())
        });
        let applied = self.store.track(apply).await.map_err(StoreError::Task)?.map_err(StoreError::Task)?;
        match applied {
            Ok(_) => {
                self.store.set_audit_head(env, &head.meta.audit_head);
                tracing::info!(env = %name, revision = head.revision, "environment reloaded from the database");
                self.verified(env, &name);
                Ok(())
            }
            Err(e) => {
                // The database's own items do not match its checksum: loud,
                // not served, and not reported fresh (what is served is not
                // the database's head); the next catch-up tries again.
                self.not_verified(env, &name);
                self.store.metrics().limit_hit("feed_resync");
                tracing::error!(env = %name, error = %flagstream::follow::error_chain(&e), "the database's state of the environment does not verify");
                Ok(())
            }
        }
    }

    /// History was lost: the environment gets a new epoch (the first relay
    /// to notice makes it), then this relay reloads it.
    pub(super) async fn new_epoch(
        &self,
        env: &Arc<Env>,
        head: &query::Head,
        why: &str,
    ) -> Result<(), StoreError> {
        let name = env.meta.load().name.clone();
        let new = crate::ops::secret::new_epoch();
        let mut c = self.db.client().await?;
        let made = query::rotate_epoch(&mut c, &name, &head.epoch, &new, &self.incarnation()).await?;
        drop(c);
        self.store.metrics().limit_hit("history_lost");
        tracing::error!(env = %name, why, new_epoch = made, "history in the database was lost: a new epoch; every subscriber resynchronises");
        self.reload(env).await
    }
}
