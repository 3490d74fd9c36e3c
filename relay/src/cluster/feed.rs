//! The PostgreSQL change feed of one relay: how every relay of a shared
//! database learns of the others' writes, and keeps its in-memory state
//! (and encode-once caches) exactly as a primary's, built from the feed.
//!
//! One direct session LISTENs on the `flagstream` channel; then every
//! environment is caught up from the history (by delta, revision by
//! revision, checksum-verified); every notification triggers the same
//! catch-up for its environment; any disconnect means reconnect, LISTEN,
//! catch up; a slow poll (every 30 s) catches up everything as a safety
//! net (notifications sent while no session listens are lost). The session
//! only listens (and answers a ping), so it never sits in a transaction.
//!
//! Lost history (a restored backup, an asynchronous failover) is detected
//! and becomes a new epoch, with a compare-and-set so the first relay to
//! notice wins: the database's head below this relay's, the commit id of
//! this relay's head differing from the database's, or the database's
//! incarnation (system id, timeline) changing: only the relay's own
//! evidence. A subscriber's cursor ahead of the head is a claim, not
//! evidence: it only asks the feed to catch up (a client holding nothing
//! but an SDK key must not be able to end an epoch). Every relay then reloads the environment
//! and its subscribers resynchronise with one snapshot; no state mixes
//! revisions of two histories. The feed also publishes this relay's
//! propagation report and reads the other relays', passes usage summaries
//! between the relays (`usage.rs`), and one relay at a time prunes the
//! history: each on a task of its own, so a query of theirs that
//! hangs (a lock on their table) never holds up the catch-up.
//!
//! Freshness is per environment and true: an environment is reported live
//! (staleness 0) only while the session answers and its last catch-up
//! verified; one whose database state failed its checksum is not, until a
//! catch-up verifies. Every step has a timeout, and a watchdog marks every
//! environment unconfirmed when the session has not answered for
//! [`SILENT_AFTER`] (a step still waits), so its staleness grows from the
//! last confirmation.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flagstream_proto::v1 as pb;
use futures_util::StreamExt;
use prost::Message;
use tokio::sync::mpsc;
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod catch_up;
mod usage;

use crate::access::Tokens;
use crate::store::postgres::query;
use crate::store::postgres::{CHANNEL, PostgresBackend};
use crate::store::{CatchUpOutcome, Env, Store, StoreError, now_ms};
use crate::stream::hub::Hub;
use crate::stream::hub::propagation::{REPORTED_REVISIONS, Report};

/// The safety-net poll: every environment is caught up this often.
const POLL: Duration = Duration::from_secs(30);
/// How often the listening session is pinged (a silently dead one is
/// replaced).
const PING: Duration = Duration::from_secs(5);
/// A ping or catch-up query slower than this means the session is dead;
/// a report exchange or pruning pass slower than this is given up.
const QUERY_TIMEOUT: Duration = Duration::from_secs(10);
/// A session that has not answered (a ping, a full catch-up) for this long
/// no longer counts as live: its environments are reported stale from their
/// last confirmation, even while a step still waits for its timeout.
const SILENT_AFTER: Duration = Duration::from_secs(10);
/// How often this relay's reports are published and the others' read.
const REPORT_EVERY: Duration = Duration::from_secs(1);
/// Peers' reports older than this are not counted (a relay that stopped).
const PEER_FRESH_SECS: f64 = 10.0;
/// How often the history is pruned (by one relay at a time).
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Notifications queued from the session before the feed falls back to
/// catching up everything.
const NOTIFY_QUEUE: usize = 1024;
/// Behind by more revisions than this, catch-up applies one coalesced
/// delta instead of one per revision.
const PER_REVISION: usize = 64;

/// The feed of one relay.
pub(crate) struct Feed {
    store: Store,
    tokens: Arc<Tokens>,
    hub: Arc<Hub>,
    db: PostgresBackend,
    /// This relay's id in the deployment's report table.
    relay_id: String,
    /// The database incarnation seen at the last connect.
    incarnation: std::sync::Mutex<String>,
    /// Whether the listening session is up and answered within
    /// [`SILENT_AFTER`].
    session_live: AtomicBool,
    /// The same, for the report exchange to wait on (it runs at once when
    /// the session comes up).
    up: tokio::sync::watch::Sender<bool>,
    /// When the session last answered (a ping, a full catch-up).
    heard_at: std::sync::Mutex<tokio::time::Instant>,
    /// Environments whose last catch-up did not verify (the database's
    /// state failed its checksum): never reported live until one does.
    unverified: std::sync::Mutex<HashSet<String>>,
    /// How usage is passed to the other relays.
    usage: UsageSharing,
}

/// How a relay passes usage to the other relays of its database.
#[derive(Debug, Clone)]
pub(crate) struct UsageSharing {
    /// `usage-share-interval`.
    pub every: Duration,
    /// This relay's persistent id (`process::persistent_id`).
    pub node: String,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("relay_id", &self.relay_id).finish_non_exhaustive()
    }
}

/// Why a session ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error("the listening session failed")]
    Session(#[source] tokio_postgres::Error),
    #[error("the listening session closed")]
    Closed,
    #[error("the database did not answer within {0:?}")]
    Timeout(Duration),
    #[error("catching up failed")]
    Store(#[from] StoreError),
}

impl Feed {
    /// A feed for `store` (opened over `db`), `tokens` and `hub`.
    pub(crate) fn new(
        store: Store,
        tokens: Arc<Tokens>,
        hub: Arc<Hub>,
        db: PostgresBackend,
        usage: UsageSharing,
    ) -> Feed {
        let relay_id = crate::ops::secret::new_epoch()[..16].to_owned();
        Feed {
            store,
            tokens,
            hub,
            db,
            relay_id,
            incarnation: std::sync::Mutex::new(String::new()),
            session_live: AtomicBool::new(false),
            up: tokio::sync::watch::channel(false).0,
            heard_at: std::sync::Mutex::new(tokio::time::Instant::now()),
            unverified: std::sync::Mutex::new(HashSet::new()),
            usage,
        }
    }

    /// Follows the database until `stop`: connect, LISTEN, catch up,
    /// follow; on any failure mark the data unconfirmed, back off (1 s
    /// doubling to 30 s, full jitter) and start over.
    ///
    /// Its periodic work runs on `tasks`, which shutdown waits for: a turn
    /// that passes usage on finishes, and one last turn passes on what the
    /// relay's SDKs reported since the previous one.
    pub(crate) async fn run(self: Arc<Self>, tasks: TaskTracker, stop: CancellationToken) {
        self.store.set_catch_up(self.clone());
        tasks.spawn(self.clone().gauges(stop.clone()));
        tasks.spawn(self.clone().exchange_reports(stop.clone()));
        tasks.spawn(self.clone().prune_history(stop.clone()));
        tasks.spawn(self.clone().share_usage(self.usage.every, stop.clone()));
        let mut failures = 0u32;
        loop {
            let started = tokio::time::Instant::now();
            let ended = tokio::select! {
                _ = stop.cancelled() => return,
                e = self.session() => e,
            };
            self.session_down();
            self.store.metrics().limit_hit("feed_session_lost");
            tracing::warn!(error = %flagstream::follow::error_chain(&ended), "change feed session ended; reconnecting");
            if started.elapsed() > Duration::from_secs(60) {
                failures = 0;
            }
            let ceiling =
                Duration::from_secs(1).saturating_mul(1 << failures.min(5)).min(Duration::from_secs(30));
            failures += 1;
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(flagstream::follow::jitter_up_to(ceiling)) => {}
            }
        }
    }

    /// Every second, per environment: `upstream_live` (1 while the change
    /// feed is live and the environment's last catch-up verified) and
    /// `staleness_seconds` (since the feed last confirmed the data
    /// current), as replicas export them; and the watchdog: a session
    /// silent for [`SILENT_AFTER`] stops counting as live.
    async fn gauges(self: Arc<Self>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            let silent = self.heard_at.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
            if silent > SILENT_AFTER && self.session_live.swap(false, Ordering::Relaxed) {
                self.up.send_replace(false);
                self.store.metrics().limit_hit("feed_silent");
                tracing::warn!(
                    silent_ms = silent.as_millis() as u64,
                    "the change feed has not heard from the database for {SILENT_AFTER:?} (a query still waits): every environment is reported stale until it does"
                );
                for env in self.store.envs() {
                    env.freshness.set_live(false);
                }
            }
            let m = self.store.metrics();
            for env in self.store.envs() {
                let labels = vec![("env", env.meta.load().name.clone())];
                m.upstream_live.get_or_create(&labels).set(i64::from(env.freshness.is_live()));
                m.staleness_seconds.get_or_create(&labels).set(self.store.staleness_ms(&env) as f64 / 1000.0);
            }
        }
    }

    /// The session ended: every environment is unconfirmed from now on.
    fn session_down(&self) {
        self.session_live.store(false, Ordering::Relaxed);
        self.up.send_replace(false);
        for env in self.store.envs() {
            env.freshness.set_live(false);
        }
    }

    /// The session answered (a ping, a full catch-up): every environment
    /// whose last catch-up verified is confirmed current now.
    fn heard(&self) {
        *self.heard_at.lock().unwrap_or_else(|p| p.into_inner()) = tokio::time::Instant::now();
        self.session_live.store(true, Ordering::Relaxed);
        self.up.send_if_modified(|up| !std::mem::replace(up, true));
        let unverified = self.unverified.lock().unwrap_or_else(|p| p.into_inner());
        for env in self.store.envs() {
            if unverified.contains(&env.meta.load().name) {
                env.freshness.set_live(false);
            } else {
                env.freshness.confirm(now_ms(), 0);
                env.freshness.set_live(true);
            }
        }
    }

    /// `env` was brought to the database's head, verified: confirmed now,
    /// and live while the session is.
    fn verified(&self, env: &Env, name: &str) {
        self.unverified.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        env.freshness.confirm(now_ms(), 0);
        env.freshness.set_live(self.session_live.load(Ordering::Relaxed));
    }

    /// `env`'s catch-up did not verify: not reported live until one does.
    fn not_verified(&self, env: &Env, name: &str) {
        self.unverified.lock().unwrap_or_else(|p| p.into_inner()).insert(name.to_owned());
        env.freshness.set_live(false);
    }

    /// One listening session, until it fails.
    async fn session(&self) -> Ended {
        let mut config = self.db.config().clone();
        // Operators (and tests) can tell the listening session apart.
        config.application_name("flagstream-relay feed");
        // Bounded as a whole: tokio-postgres's connect timeout covers the
        // TCP connect, not a TLS handshake or startup that stalls.
        let (client, connection) =
            match tokio::time::timeout(QUERY_TIMEOUT, self.db.tls().connect(&config)).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Ended::Session(e),
                Err(_) => return Ended::Timeout(QUERY_TIMEOUT),
            };
        let (tx, mut notes) = mpsc::channel::<String>(NOTIFY_QUEUE);
        let overflow = Arc::new(AtomicBool::new(false));
        let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<Option<tokio_postgres::Error>>();
        let over = overflow.clone();
        // Drives the connection and hands notifications over; bounded: a
        // full queue sets `overflow`, and everything is caught up instead.
        tokio::spawn(async move {
            let mut connection = connection;
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            let mut error = None;
            while let Some(m) = messages.next().await {
                match m {
                    Ok(AsyncMessage::Notification(n)) => {
                        if tx.try_send(n.payload().to_owned()).is_err() {
                            over.store(true, Ordering::Relaxed);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            // The feed may be gone already (its session ended first); then
            // nobody waits for the cause.
            if closed_tx.send(error).is_err() {
                tracing::trace!("the feed session ended before its connection did");
            }
        });
        match tokio::time::timeout(QUERY_TIMEOUT, client.batch_execute(&format!("LISTEN {CHANNEL}"))).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Ended::Session(e),
            Err(_) => return Ended::Timeout(QUERY_TIMEOUT),
        }
        tracing::info!("change feed listening");
        // Listening first, then catching up: nothing committed in between
        // is missed.
        match timed(self.connect_checks()).await {
            Ok(()) => {}
            Err(e) => return e,
        }
        if let Err(e) = timed(self.catch_up_all()).await {
            return e;
        }
        self.heard();
        let mut poll = tokio::time::interval(POLL);
        let mut ping = tokio::time::interval(PING);
        loop {
            tokio::select! {
                note = notes.recv() => {
                    let Some(note) = note else { return Ended::Closed };
                    if let Err(e) = timed(self.handle(&note)).await {
                        return e;
                    }
                }
                closed = &mut closed => return closed.ok().flatten().map_or(Ended::Closed, Ended::Session),
                () = self.store.feed_kicked() => {
                    if let Err(e) = timed(self.catch_up_all()).await {
                        return e;
                    }
                }
                _ = poll.tick() => {
                    if let Err(e) = timed(self.catch_up_all()).await {
                        return e;
                    }
                    self.heard();
                }
                _ = ping.tick() => {
                    match tokio::time::timeout(QUERY_TIMEOUT, client.simple_query("SELECT 1")).await {
                        Ok(Ok(_)) => {}
                        Ok(Err(e)) => return Ended::Session(e),
                        Err(_) => return Ended::Timeout(QUERY_TIMEOUT),
                    }
                    // Notifications were dropped: what they named is caught
                    // up before anything counts as confirmed.
                    if overflow.swap(false, Ordering::Relaxed)
                        && let Err(e) = timed(self.catch_up_all()).await
                    {
                        return e;
                    }
                    self.heard();
                }
            }
        }
    }

    /// Every [`REPORT_EVERY`], until `stop`: publishes this relay's reports
    /// and reads the others'. Best effort: a failure or a timeout is logged
    /// and the next tick tries again; the change feed is unaffected.
    async fn exchange_reports(self: Arc<Self>, stop: CancellationToken) {
        let mut published: HashMap<String, (Vec<u8>, tokio::time::Instant)> = HashMap::new();
        let (mut up, mut first) = (self.up.subscribe(), true);
        // Only while the session is up (no failure per second logged
        // through a database outage), and at once when it comes up.
        while next_turn(&mut up, &mut first, REPORT_EVERY, &stop).await {
            let c = match self.db.client().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "publishing or reading propagation reports failed");
                    continue;
                }
            };
            match tokio::time::timeout(QUERY_TIMEOUT, self.reports(&c, &mut published)).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %flagstream::follow::error_chain(&e), "publishing or reading propagation reports failed")
                }
                Err(_) => {
                    // Its query may still wait on the server: the connection
                    // is closed, never handed to another user of the pool.
                    drop(deadpool_postgres::Object::take(c));
                    self.store.metrics().limit_hit("feed_step_timeout");
                    tracing::warn!(
                        "publishing or reading propagation reports took over {QUERY_TIMEOUT:?}; given up, the next tick tries again"
                    );
                }
            }
        }
    }

    /// As soon as the session is first up, then every [`PRUNE_EVERY`]
    /// while it is up, until `stop`: one pruning pass (if no other relay
    /// is pruning), given up after [`QUERY_TIMEOUT`].
    async fn prune_history(self: Arc<Self>, stop: CancellationToken) {
        let (mut up, mut first) = (self.up.subscribe(), true);
        while next_turn(&mut up, &mut first, PRUNE_EVERY, &stop).await {
            self.prune().await;
        }
    }

    /// On every (re)connect: the database's incarnation. One that differs
    /// from the one an environment's epoch was made in means a restore or a
    /// failover: history after it may be gone, so that epoch ends.
    async fn connect_checks(&self) -> Result<(), StoreError> {
        let c = self.db.client().await?;
        let now = query::incarnation(&c).await?;
        *self.incarnation.lock().unwrap_or_else(|p| p.into_inner()) = now;
        Ok(())
    }

    fn incarnation(&self) -> String {
        self.incarnation.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Acts on one notification.
    async fn handle(&self, note: &str) -> Result<(), StoreError> {
        match note.split_once(':') {
            Some(("rev" | "meta" | "env", rest)) => {
                let env = rest.rsplit_once(':').filter(|_| note.starts_with("rev:")).map_or(rest, |(e, _)| e);
                self.catch_up(env).await
            }
            _ if note == "tokens" => self.reload_tokens().await,
            _ => {
                tracing::debug!(note, "unknown notification ignored");
                Ok(())
            }
        }
    }

    /// Reads the tokens again; streams of replicas using a token another
    /// relay revoked end here too.
    async fn reload_tokens(&self) -> Result<(), StoreError> {
        let gone = self.tokens.reload().await.map_err(|e| StoreError::Storage(Box::new(e)))?;
        for name in gone {
            let ended = self.hub.end_token(&name);
            tracing::info!(token = %name, streams = ended, "token revoked at another relay");
        }
        Ok(())
    }

    /// Publishes this relay's reports (when changed) and reads the others',
    /// on `c`.
    async fn reports(
        &self,
        c: &tokio_postgres::Client,
        published: &mut HashMap<String, (Vec<u8>, tokio::time::Instant)>,
    ) -> Result<(), StoreError> {
        for env in self.store.envs() {
            let state = env.state.load();
            let recent: Vec<u64> = std::iter::once(state.revision)
                .chain(state.log.iter().rev().take(REPORTED_REVISIONS).map(|e| e.revision))
                .collect();
            let mut report = self.hub.subtree_report(&state.name, &state.epoch, &recent).to_proto();
            (report.nodes, report.nodes_omitted) =
                crate::cluster::tree::subtree(&self.store, &self.hub, &state.name);
            let bytes = report.encode_to_vec();
            // Unchanged reports are republished too, well within the
            // freshness peers require: a quiet relay still counts.
            let fresh = published.get(&state.name).is_some_and(|(b, at)| {
                *b == bytes && at.elapsed() < Duration::from_secs_f64(PEER_FRESH_SECS / 3.0)
            });
            if !fresh {
                query::publish_report(c, &self.relay_id, &state.name, &state.epoch, &bytes).await?;
                published.insert(state.name.clone(), (bytes, tokio::time::Instant::now()));
            }
        }
        let mut peers: HashMap<String, Vec<Report>> = HashMap::new();
        for (_, env, _, bytes) in query::peer_reports(c, &self.relay_id, PEER_FRESH_SECS).await? {
            match pb::PropagationReport::decode(bytes.as_slice()) {
                Ok(r) => {
                    let report = Report::from_proto(&r, "", &env, &self.hub.node.id);
                    peers.entry(env).or_default().push(report);
                }
                Err(e) => tracing::warn!(env, error = %e, "a peer relay's report does not decode"),
            }
        }
        self.hub.set_peer_reports(peers);
        let usage = query::notification_queue_usage(c).await?;
        self.store.metrics().notification_queue_usage.set(usage);
        Ok(())
    }

    /// One pruning pass, if no other relay is pruning, given up after
    /// [`QUERY_TIMEOUT`] (its connection closed, so the pruning
    /// transaction and its advisory lock end with it).
    async fn prune(&self) {
        let result = async {
            let c = self.db.client().await?;
            match tokio::time::timeout(QUERY_TIMEOUT, query::prune(&c, self.store.retention())).await {
                Ok(r) => r.map(Some),
                Err(_) => {
                    drop(deadpool_postgres::Object::take(c));
                    Ok(None)
                }
            }
        }
        .await;
        let result = match result {
            Ok(None) => {
                self.store.metrics().limit_hit("feed_step_timeout");
                tracing::warn!(
                    "pruning the history took over {QUERY_TIMEOUT:?}; given up, the next pass tries again"
                );
                return;
            }
            Ok(Some(r)) => Ok(r),
            Err(e) => Err(e),
        };
        match result {
            Ok(Some(p)) if p.revisions + p.audit + p.requests > 0 => {
                tracing::info!(
                    revisions = p.revisions,
                    audit = p.audit,
                    requests = p.requests,
                    "pruned the database's history"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %flagstream::follow::error_chain(&e), "pruning the history failed; the next pass tries again")
            }
        }
    }
}

#[async_trait::async_trait]
impl crate::store::CatchUp for Feed {
    async fn catch_up_locked(&self, env: &Arc<Env>, row_locked: bool) -> CatchUpOutcome {
        let name = env.meta.load().name.clone();
        let caught_up = timed(Feed::catch_up_locked(self, env, &name, row_locked)).await;
        match caught_up {
            Ok(outcome) => outcome,
            Err(e) => {
                tracing::warn!(env = %name, error = %flagstream::follow::error_chain(&e), "catching up for a write failed");
                CatchUpOutcome::Done
            }
        }
    }
}

/// Runs `work` within three [`QUERY_TIMEOUT`]s (a query on a dead
/// connection would otherwise wait for TCP to give up).
async fn timed<T>(work: impl Future<Output = Result<T, StoreError>>) -> Result<T, Ended> {
    match tokio::time::timeout(QUERY_TIMEOUT * 3, work).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(Ended::Timeout(QUERY_TIMEOUT * 3)),
    }
}

/// Waits for a periodic step's next turn: `every` after the previous one
/// (at once the first time), and then until the session is up. `false`
/// once `stop` fires or the feed is gone.
async fn next_turn(
    up: &mut tokio::sync::watch::Receiver<bool>,
    first: &mut bool,
    every: Duration,
    stop: &CancellationToken,
) -> bool {
    if !std::mem::take(first) {
        tokio::select! {
            _ = stop.cancelled() => return false,
            _ = tokio::time::sleep(every) => {}
        }
    }
    tokio::select! {
        _ = stop.cancelled() => false,
        r = up.wait_for(|up| *up) => r.is_ok(),
    }
}
