//! `WatchPropagation`, bounded: a revision past the environment's head is
//! refused (`OUT_OF_RANGE` naming the head), open watches are capped per
//! admin token (`max-watches-per-token`) and per relay (`max-watches`),
//! each refusal counted (`flagstream_limit_hits_total{limit=...}`), and an
//! open watch ends with `UNAUTHENTICATED` as soon as its token is revoked
//! (the token registry's change notification wakes it; every poll checks
//! too). Each poll reads one environment's subscribers (the hub indexes
//! them by environment).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use futures_util::Stream;
use tonic::{Request, Response, Status};

use super::{AdminService, authorize};
use crate::access::{Principal, Role};
use crate::error::Refusal;
use crate::ops::metrics::Metrics;

/// The stream `WatchPropagation` answers with.
pub(crate) type PropagationStream =
    Pin<Box<dyn Stream<Item = Result<pb::WatchPropagationResponse, Status>> + Send>>;

/// The open watches, by token, against their caps.
#[derive(Debug)]
pub(crate) struct Watches {
    per_token: usize,
    total: usize,
    /// Open watches: relay-wide count and per token (entries removed at 0,
    /// so the map holds only tokens with an open watch).
    open: Mutex<(usize, HashMap<String, usize>)>,
    metrics: Metrics,
}

/// One open watch's place under the caps; given back when dropped (the
/// stream ended or its client went away).
#[derive(Debug)]
pub(crate) struct WatchSlot {
    watches: Arc<Watches>,
    token: String,
}

impl Watches {
    /// Caps of `per_token` open watches per admin token and `total` per
    /// relay.
    pub(crate) fn new(per_token: usize, total: usize, metrics: Metrics) -> Arc<Watches> {
        Arc::new(Watches { per_token, total, open: Mutex::new((0, HashMap::new())), metrics })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<String, usize>)> {
        // Plain counters: consistent whatever panicked while holding them.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a new watch by `token`, or RESOURCE_EXHAUSTED naming the
    /// cap it is over (counted).
    pub(crate) fn open(self: &Arc<Self>, token: &str) -> Result<WatchSlot, Status> {
        let mut open = self.lock();
        if open.0 >= self.total {
            drop(open);
            self.metrics.limit_hit("max_watches");
            return Err(Refusal::OverLimit(format!(
                "{} propagation watches are open on this relay, the limit is {} (max-watches)",
                self.total, self.total
            ))
            .into());
        }
        let n = open.1.get(token).copied().unwrap_or(0);
        if n >= self.per_token {
            drop(open);
            self.metrics.limit_hit("max_watches_per_token");
            return Err(Refusal::OverLimit(format!(
                "token {token:?}: {n} propagation watches open, the limit is {} (max-watches-per-token)",
                self.per_token
            ))
            .into());
        }
        open.0 += 1;
        open.1.insert(token.to_owned(), n + 1);
        Ok(WatchSlot { watches: self.clone(), token: token.to_owned() })
    }

    /// Watches open now (tests).
    #[cfg(test)]
    fn count(&self) -> usize {
        self.lock().0
    }
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        let mut open = self.watches.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.token) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.1.remove(&self.token);
            }
        }
    }
}

/// How long a watch waits for this relay to reach the revision it names
/// before refusing it as past the head.
const HEAD_WAIT: Duration = Duration::from_secs(5);

/// What the stream carries from one poll to the next.
struct State {
    first: Option<pb::Propagation>,
    this: AdminService,
    principal: Principal,
    changes: tokio::sync::watch::Receiver<u64>,
    done: bool,
    _slot: WatchSlot,
}

impl AdminService {
    pub(super) async fn watch_propagation_call(
        &self,
        req: Request<pb::WatchPropagationRequest>,
    ) -> Result<Response<PropagationStream>, Status> {
        let env = req.get_ref().environment.clone();
        let principal = authorize(&req, Role::Read, Some(&env), "read propagation")?;
        let r = req.into_inner();
        let slot = self.watches.open(principal.name())?;
        if let Some(rev) = r.revision {
            // Another relay of a shared database, or a replica, may take a
            // moment to reach a revision just written elsewhere: wait for it
            // briefly (holding the watch's slot), then refuse.
            let e = self.store.env(&env)?;
            let mut head = e.head.subscribe();
            let reached = tokio::time::timeout(HEAD_WAIT, head.wait_for(|h| *h >= rev)).await;
            let head = e.state.load().revision;
            if !matches!(reached, Ok(Ok(_))) || rev > head {
                return Err(crate::error::out_of_range(
                    "revision",
                    format!("{rev} is past the head of environment {env:?}, revision {head}"),
                ));
            }
        }
        // Subscribed before the first check: a revocation from here on wakes
        // the stream.
        let changes = self.tokens.changes();
        let first = self.propagation(&env, r.revision)?;
        let revision = first.revision;
        let interval = Duration::from_millis(u64::from(r.min_interval_ms).max(100));
        let state =
            State { first: Some(first), this: self.clone(), principal, changes, done: false, _slot: slot };
        let stream = futures_util::stream::unfold(state, move |mut s| {
            let env = env.clone();
            async move {
                if s.done {
                    return None;
                }
                let p = match s.first.take() {
                    Some(p) => p,
                    None => {
                        if let Err(e) = s.wait(interval).await {
                            s.done = true;
                            return Some((Err(e), s));
                        }
                        match s.this.propagation(&env, Some(revision)) {
                            Ok(p) => p,
                            Err(e) => {
                                s.done = true;
                                return Some((Err(e), s));
                            }
                        }
                    }
                };
                // Complete once every subscriber counted acked and every
                // replica relay reported on the revision.
                s.done = p.subscribers_acked >= p.subscribers_total && p.relays_reporting >= p.relays_total;
                Some((Ok(pb::WatchPropagationResponse { propagation: Some(p) }), s))
            }
        });
        Ok(Response::new(Box::pin(stream)))
    }
}

impl State {
    /// Waits one interval; ends early with UNAUTHENTICATED when the token
    /// is revoked meanwhile (or already was).
    async fn wait(&mut self, interval: Duration) -> Result<(), Status> {
        let sleep = tokio::time::sleep(interval);
        tokio::pin!(sleep);
        loop {
            self.check_token()?;
            tokio::select! {
                _ = &mut sleep => return self.check_token(),
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        // The registry is gone (shutting down): no more
                        // notifications; the poll still checks.
                        (&mut sleep).await;
                        return self.check_token();
                    }
                }
            }
        }
    }

    fn check_token(&self) -> Result<(), Status> {
        if self.this.tokens.is_current(&self.principal) {
            return Ok(());
        }
        let name = self.principal.name();
        tracing::info!(token = %name, "propagation watch ended: its token was revoked");
        Err(Refusal::Revoked(format!("token {name:?} was revoked; the propagation watch ended")).into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The caps refuse the watch past them, counted, and a dropped slot
    /// frees its place.
    #[test]
    fn caps_per_token_and_per_relay() {
        let m = Metrics::new();
        let w = Watches::new(2, 3, m.clone());
        let a1 = w.open("a").unwrap();
        let _a2 = w.open("a").unwrap();
        let e = w.open("a").unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("max-watches-per-token"), "{}", e.message());
        let _b1 = w.open("b").unwrap();
        let e = w.open("c").unwrap_err();
        assert!(e.message().contains("(max-watches)"), "{}", e.message());
        drop(a1);
        assert_eq!(w.count(), 2);
        w.open("c").unwrap();
        assert_eq!(w.count(), 2, "the slot was dropped at once");
    }
}
