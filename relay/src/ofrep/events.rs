//! OFREP's change stream (server-sent events, OFREP 0.3 / ADR-0008): a
//! `refetchEvaluation` event each time the environment's head moves, for
//! static-context clients to re-fetch their bulk evaluation.
//!
//! - **Where.** `GET /ofrep/v1/events?env=<name>&token=<t>`, advertised in
//!   every bulk answer's `eventStreams` as a request URI without an origin
//!   (the client keeps its own base URL, so any relay of the deployment
//!   serves it). `EventSource` cannot send headers, so the URL carries a
//!   stream token: the first 128 bits of SHA-256 over `ofrep-events:` and
//!   the SDK key's hash. It opens this stream only, never an evaluation;
//!   every relay derives the same token (from the key's hash, which the
//!   relays and their database hold: whoever can read those can open a
//!   stream, and learns when revisions move, nothing else); revoking the
//!   key ends its streams, and so does removing their page's origin from
//!   the environment's CORS list (checked at each connect, each heartbeat
//!   and before each event). At most `ofrep-max-event-streams` are open.
//! - **Events.** `id: <epoch>:<revision>`, `event: message` (the only event
//!   name the web provider listens to), `data: {"type":
//!   "refetchEvaluation", "etag": "<epoch>:<revision>", "lastModified":
//!   <commit, Unix s>}`. A stream starts with the head's id (no event),
//!   so a reconnecting client sends it back. A `Last-Event-ID` behind the
//!   head (an older revision, or another epoch) is answered with one
//!   event, after the spread: a refetch needs no per-revision detail, so
//!   the change log's replay is that one event, whichever relay the client
//!   reconnects to. (OFREP clients also re-fetch after every reconnect.)
//! - **Client-side keys.** A client key's stream follows only what its
//!   answers depend on (`view.rs`: the flags visible to clients, their
//!   prerequisites and segments): its ids are `<epoch>:c<digest>`, an
//!   event comes only when that digest moves, and its data carries no
//!   `lastModified`. A write to a hidden flag reaches no browser.
//! - **Spread.** After a write, each stream waits a random time in `[0,
//!   ofrep-event-spread)` (default 500 ms) before its event, and takes
//!   every revision that arrived meanwhile into that one event: a write to
//!   an environment with 100,000 open streams arrives as re-fetches spread
//!   evenly over half a second (~200,000 a second across the relays
//!   serving them), not 100,000 at once; a burst of
//!   writes within the spread costs one re-fetch per client. A write that
//!   leaves a client's results as they were costs it a `304`.
//! - **Liveness.** A comment line every 15 s (so a dead client is noticed
//!   and idle proxies keep the stream), `retry: 1000` at the start (the
//!   client reconnects after a second).

use std::sync::Arc;
use std::time::Duration;

use hyper::body::{Bytes, Frame};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use super::answer::Viewer;
use super::view::Views;
use crate::ops::http::Body;
use crate::ops::metrics::Metrics;
use crate::store::Env;

/// A comment line this often keeps the stream alive.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// The stream token of the SDK key whose hash is `key_hash`.
pub(crate) fn token(key_hash: &str) -> String {
    let digest = Sha256::digest(format!("ofrep-events:{key_hash}").as_bytes());
    hex::encode(&digest[..16])
}

/// Who `token` is the stream token of (the key's id and kind), if it is
/// one of `env`'s keys valid now.
pub(crate) fn authorized(env: &Env, token: &str, now_unix_ms: u64) -> Option<(String, Viewer)> {
    let meta = env.meta.load();
    let key = meta.sdk_keys.iter().find(|k| {
        k.valid_at(now_unix_ms) && crate::ops::secret::constant_time_eq(&self::token(&k.hash), token)
    })?;
    Some((key.id.clone(), if key.client { Viewer::Client } else { Viewer::Server }))
}

/// What one stream follows.
pub(crate) struct Follow {
    /// The environment.
    pub env: Arc<Env>,
    /// The id of the key whose token opened it (ids are never reused: a
    /// rotated key's successor has another).
    pub key_id: String,
    /// Whose stream it is.
    pub viewer: Viewer,
    /// The client view digests (for client-side keys).
    pub views: Arc<Views>,
    /// The page's origin, for a stream a page opened.
    pub origin: Option<String>,
}

impl Follow {
    /// The id of what the stream follows, now.
    fn id(&self) -> Arc<str> {
        match self.viewer {
            Viewer::Server => {
                let s = self.env.state.load();
                format!("{}:{}", s.epoch, s.revision).into()
            }
            Viewer::Client => self.views.id(&self.env),
        }
    }

    /// Whether the stream goes on: its key still valid, its page's origin
    /// (if it came from a page) still listed, its environment still there.
    fn live(&self) -> bool {
        let now = crate::store::now_ms();
        let meta = self.env.meta.load();
        *self.env.head.borrow() != u64::MAX
            && meta.sdk_keys.iter().any(|k| k.id == self.key_id && k.valid_at(now))
            && self.origin.as_deref().is_none_or(|o| meta.allows_origin(o))
    }

    /// Whether a client's last event id is behind `current`: for a
    /// server-side key another epoch or an older revision (a client that
    /// saw a newer head elsewhere, on a relay ahead of this one, is not);
    /// for a client-side key any other id.
    fn behind(&self, last: &str, current: &str) -> bool {
        match self.viewer {
            Viewer::Client => last != current,
            Viewer::Server => {
                let s = self.env.state.load();
                match last.split_once(':') {
                    Some((epoch, rev)) if epoch == s.epoch => {
                        rev.parse::<u64>().map_or(true, |r| r < s.revision)
                    }
                    _ => true,
                }
            }
        }
    }

    /// A `refetchEvaluation` event with id `id` (a client-side key's
    /// without `lastModified`).
    fn event(&self, id: &str) -> Bytes {
        let data = match self.viewer {
            Viewer::Server => serde_json::json!({
                "type": "refetchEvaluation",
                "etag": id,
                "lastModified": self.env.state.load().committed_unix_ms / 1000,
            }),
            Viewer::Client => serde_json::json!({ "type": "refetchEvaluation", "etag": id }),
        };
        Bytes::from(format!("id: {id}\nevent: message\ndata: {data}\n\n"))
    }
}

/// The request URI a bulk answer advertises for `env` and the key hash.
pub(crate) fn request_uri(env: &str, key_hash: &str) -> String {
    format!("/ofrep/v1/events?env={}&token={}", encode(env), token(key_hash))
}

/// Percent-encodes what is not an unreserved URL character.
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The body of one change stream (`follow`): a task writes its events
/// until the client goes away (the body is dropped), the key is revoked,
/// the environment is deleted or the connection's lifetime ends. `_slot`
/// is the stream's place among `ofrep-max-event-streams`, held as long as
/// the task runs.
pub(crate) fn stream(
    follow: Follow,
    last_event_id: Option<String>,
    spread: Duration,
    metrics: Metrics,
    slot: tokio::sync::OwnedSemaphorePermit,
) -> Body {
    use http_body_util::BodyExt;
    let (tx, rx) = mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _slot = slot;
        metrics.ofrep_event_streams.inc();
        run(&follow, last_event_id, spread, &tx).await;
        metrics.ofrep_event_streams.dec();
    });
    let frames = tokio_stream::wrappers::ReceiverStream::new(rx);
    let frames = futures_util::StreamExt::map(frames, |b| Ok::<_, std::io::Error>(Frame::data(b)));
    http_body_util::StreamBody::new(frames).boxed()
}

/// One stream's events; returns when the client is gone (its receiver
/// closed, noticed at once), the key no longer valid or the environment
/// deleted.
async fn run(f: &Follow, last_event_id: Option<String>, spread: Duration, tx: &mpsc::Sender<Bytes>) {
    let mut head = f.env.head.subscribe();
    // Deleted between the lookup and the subscription: nothing to follow.
    if !f.live() {
        return;
    }
    // The current id first, without an event: a client that reconnects
    // after this sends it as its `Last-Event-ID`, even if no event came.
    let mut announced = f.id();
    let start = format!("retry: 1000\nid: {announced}\n: flagstream\n\n");
    if tx.send(Bytes::from(start)).await.is_err() {
        return;
    }
    let mut pending = last_event_id.is_some_and(|id| f.behind(&id, &announced));
    loop {
        if pending {
            let wait = spread.mul_f64(rand::random::<f64>());
            tokio::select! {
                _ = tx.closed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
            pending = false;
            head.borrow_and_update();
            announced = f.id();
            if !f.live() || tx.send(f.event(&announced)).await.is_err() {
                return;
            }
            continue;
        }
        tokio::select! {
            _ = tx.closed() => return,
            changed = head.changed() => {
                if changed.is_err() || *head.borrow_and_update() == u64::MAX {
                    return; // the environment was deleted
                }
                // A client-side key's view may not have moved.
                pending = f.viewer == Viewer::Server || f.id() != announced;
            }
            _ = tokio::time::sleep(HEARTBEAT) => {
                if !f.live() || tx.send(Bytes::from_static(b": ping\n\n")).await.is_err() {
                    return;
                }
            }
        }
    }
}
