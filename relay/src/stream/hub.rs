//! Subscriber registry: who is connected (SDKs and replica relays), to
//! which environment, at which applied revision; admission control; the
//! drain signal; the snapshot-send budget; propagation statistics from
//! acks and replica reports (`propagation.rs` holds the histograms); and
//! the reaper that cuts off subscribers whose transport stopped pulling.
//! Sends nothing itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::task::AtomicWaker;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub(crate) use crate::config::HubLimits;
use crate::ops::metrics::Metrics;
use crate::store::now_ms;
use crate::stream::hub::propagation::{Report, Ring};
use crate::stream::transport::ConnInfo;
use crate::usage::Usage;

/// A stream the reaper found behind the head: since when, the head it must
/// be handed to catch up, and its byte count then (for the credit).
#[derive(Debug, Clone, Copy)]
struct Behind {
    target: u64,
    since_ms: u64,
    bytes: u64,
}

/// One connected subscriber.
#[derive(Debug)]
pub(crate) struct Subscriber {
    /// Registry id.
    pub id: u64,
    /// Environment name.
    pub env: String,
    /// Id of the SDK key the stream was opened with.
    pub key_id: String,
    /// Highest revision the subscriber acknowledged.
    pub applied: AtomicU64,
    /// When the last message was handed to the transport: monotonic ms
    /// ([`Hub::mono_ms`]), so a wall-clock step cuts nobody off.
    pub last_progress_ms: AtomicU64,
    /// When the stream started, monotonic ms (for its age).
    pub started_mono_ms: u64,
    /// The revision whose data was last handed whole to the transport (a
    /// delta's target, or a snapshot's once its last chunk went); 0 while
    /// a snapshot is on its way.
    pub sent_revision: AtomicU64,
    /// The revision of a multi-chunk snapshot on its way (0: none): the
    /// stream is behind only if the head moves past it, so a snapshot on a
    /// slow link with no newer write is never cut, however slow.
    pub snapshot_revision: AtomicU64,
    /// Bytes handed to the transport (progress, for the behind credit).
    pub sent_bytes: AtomicU64,
    /// Set while the stream waits for a snapshot-send permit: the relay's
    /// own budget holds it back, so it is not counted as behind.
    pub waiting_permit: AtomicBool,
    /// The environment's head revision (set once, when the stream starts).
    pub head: std::sync::OnceLock<tokio::sync::watch::Receiver<u64>>,
    /// The reaper's record of this stream being behind (only it locks this).
    behind: Mutex<Option<Behind>>,
    /// When the stream started, Unix ms (compared with commit times).
    pub started_unix_ms: u64,
    /// The stream's task: woken on stop and on drain (either ends the
    /// stream, so the stream registers once: `subscribe/outbound.rs`; a
    /// cancellation token would take a mutex on every wait, i.e. on every
    /// delivery).
    pub wake: AtomicWaker,
    /// Set by [`Subscriber::stop`].
    pub stopped: AtomicBool,
    /// Why the stream must end with an error (see [`Subscriber::fail`]).
    pub failure: Mutex<Option<tonic::Status>>,
    /// Why the stream ended, as counted in `stream_ends` (set once).
    pub ended: std::sync::OnceLock<String>,
    /// The connection it rides on (to cut it off).
    pub conn: Option<ConnInfo>,
    /// Client-reported name/version, for status.
    pub sdk: String,
    /// A replica relay (not a leaf: it reports its subtree instead of
    /// being counted, PROTOCOL.md §4).
    pub relay: bool,
    /// A replica relay's latest propagation report.
    pub report: Mutex<Option<Report>>,
}

impl Subscriber {
    /// Ends this subscriber's stream.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.wake.wake();
    }

    /// Ends this subscriber's stream with `status` in its trailers (an
    /// error on the request side, which the client should see as such).
    pub(crate) fn fail(&self, status: tonic::Status) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        self.stop();
    }

    /// The status the stream ends with, if it failed.
    pub(crate) fn take_failure(&self) -> Option<tonic::Status> {
        self.failure.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Whether the stream was stopped.
    #[inline]
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::Acquire)
    }
}

/// Why a subscriber was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Rejection {
    /// The relay-wide limit.
    RelayFull,
    /// The environment's limit.
    EnvFull,
    /// The environment's replica stream limit.
    ReplicasFull,
    /// The relay is draining.
    Draining,
}

/// The registry. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub(crate) struct Hub {
    subs: Mutex<HashMap<u64, Arc<Subscriber>>>,
    per_env: Mutex<HashMap<String, usize>>,
    /// Replica relay streams per environment (locked with `per_env`);
    /// entries removed at zero.
    replicas_per_env: Mutex<HashMap<String, usize>>,
    /// `subs` by environment (SDKs and replica relays): what propagation
    /// reads per poll, without walking every environment's subscribers.
    /// Locked after `subs` and `per_env`; entries removed when empty.
    by_env: Mutex<HashMap<String, HashMap<u64, Arc<Subscriber>>>>,
    next_id: AtomicU64,
    /// Mirrors `drain` for cheap per-message checks.
    draining: AtomicBool,
    /// Woken when the last subscriber leaves (the drain waits on it).
    emptied: tokio::sync::Notify,
    /// Permits for concurrent snapshot sends.
    pub snapshot_permits: Arc<Semaphore>,
    /// Flag usage the subscribers report (`crate::usage`).
    pub usage: Usage,
    /// Per environment; hashed on every ack, hence foldhash.
    stats: Mutex<HashMap<String, Ring, foldhash::fast::RandomState>>,
    /// The latest reports of the other relays of a shared database, per
    /// environment (PostgreSQL: every relay answers for the deployment).
    peers: Mutex<HashMap<String, Vec<Report>>>,
    /// This relay as a node of the relay tree (`crate::cluster::tree`).
    pub node: crate::stream::hub::node::Identity,
    /// Limits in force.
    pub limits: HubLimits,
    /// The per-environment subscriber quota now (reloaded on SIGHUP).
    per_env_quota: std::sync::atomic::AtomicUsize,
    metrics: Metrics,
    /// Origin of the monotonic clock every timeout here is measured on.
    clock: tokio::time::Instant,
}

impl Hub {
    /// A registry enforcing `limits`.
    pub(crate) fn new(limits: HubLimits, metrics: Metrics) -> Hub {
        Hub {
            subs: Mutex::new(HashMap::new()),
            per_env: Mutex::new(HashMap::new()),
            replicas_per_env: Mutex::new(HashMap::new()),
            by_env: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            draining: AtomicBool::new(false),
            emptied: tokio::sync::Notify::new(),
            snapshot_permits: Arc::new(Semaphore::new(limits.snapshot_concurrency.max(1))),
            usage: Usage::new(metrics.clone(), false),
            stats: Mutex::new(HashMap::default()),
            peers: Mutex::new(HashMap::new()),
            node: crate::stream::hub::node::Identity::default(),
            per_env_quota: std::sync::atomic::AtomicUsize::new(limits.max_subscribers_per_env),
            limits,
            metrics,
            clock: tokio::time::Instant::now(),
        }
    }

    /// The same hub with usage kept for an upstream too (a replica).
    pub(crate) fn forwarding_usage(mut self) -> Hub {
        self.usage = Usage::new(self.metrics.clone(), true);
        self
    }

    /// Monotonic milliseconds since the hub was made: what liveness
    /// deadlines compare (tokio's clock: never steps, and a paused test
    /// clock drives it).
    #[inline]
    pub(crate) fn mono_ms(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        // A panic while holding one of these locks leaves plain counters and
        // maps, still consistent enough to serve; never propagate poison.
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the per-environment subscriber quota (SIGHUP).
    pub(crate) fn set_subscriber_quota(&self, n: usize) {
        self.per_env_quota.store(n, Ordering::Relaxed);
    }

    /// Starts draining: new subscribers are refused and every stream asks
    /// its client to reconnect elsewhere.
    pub(crate) fn start_drain(&self) {
        self.draining.store(true, Ordering::Release);
        // Every stream wakes and sees the flag (set first, so a subscriber
        // admitted after this loop sees it on its first poll).
        for sub in Self::lock(&self.subs).values() {
            sub.wake.wake();
        }
    }

    /// Whether the relay is draining.
    #[inline]
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// Admits a subscriber or says why not; counted either way. `applied`
    /// is what its cursor says it already has (0 for another epoch).
    /// A replica relay (`relay`) is admitted whatever the SDK limits say
    /// (a replica must always be able to follow), except while draining.
    pub(crate) fn admit(
        &self,
        env: &str,
        key_id: &str,
        conn: Option<ConnInfo>,
        sdk: String,
        applied: u64,
        relay: bool,
    ) -> Result<Arc<Subscriber>, Rejection> {
        let result = self.try_admit(env, key_id, conn, sdk, applied, relay);
        let (result_label, reason) = match &result {
            Ok(_) => ("accepted", "ok"),
            Err(Rejection::RelayFull) => ("rejected", "relay_full"),
            Err(Rejection::EnvFull) => ("rejected", "environment_full"),
            Err(Rejection::ReplicasFull) => ("rejected", "replica_streams_full"),
            Err(Rejection::Draining) => ("rejected", "draining"),
        };
        self.metrics
            .subscribes
            .get_or_create(&vec![("result", result_label.into()), ("reason", reason.into())])
            .inc();
        match &result {
            Err(Rejection::RelayFull) => self.metrics.limit_hit("max_subscribers"),
            Err(Rejection::EnvFull) => {
                self.metrics.limit_hit("max_subscribers_per_env");
                self.metrics.quota_refusal(env, "subscribers");
            }
            Err(Rejection::ReplicasFull) => {
                self.metrics.limit_hit("max_replica_streams_per_env");
                tracing::warn!(
                    env,
                    limit = self.limits.max_replica_streams_per_env,
                    "replica stream refused: the environment's replica stream limit (max-replica-streams-per-env) is reached"
                );
            }
            // Refusals while draining are expected on every deploy; they
            // are counted in `subscribes`, not as a limit.
            Err(Rejection::Draining) | Ok(_) => {}
        }
        result
    }

    fn try_admit(
        &self,
        env: &str,
        key_id: &str,
        conn: Option<ConnInfo>,
        sdk: String,
        applied: u64,
        relay: bool,
    ) -> Result<Arc<Subscriber>, Rejection> {
        if self.is_draining() {
            return Err(Rejection::Draining);
        }
        let mut subs = Self::lock(&self.subs);
        let mut per_env = Self::lock(&self.per_env);
        if !relay {
            // SDK subscribers only: replica relays are not counted.
            if per_env.values().sum::<usize>() >= self.limits.max_subscribers {
                return Err(Rejection::RelayFull);
            }
            let n = per_env.entry(env.to_owned()).or_default();
            if *n >= self.per_env_quota.load(Ordering::Relaxed) {
                return Err(Rejection::EnvFull);
            }
            *n += 1;
            self.metrics.subscribers.get_or_create(&vec![("env", env.to_owned())]).set(*n as i64);
        } else {
            let mut replicas = Self::lock(&self.replicas_per_env);
            let n = replicas.entry(env.to_owned()).or_default();
            if *n >= self.limits.max_replica_streams_per_env {
                if *n == 0 {
                    replicas.remove(env);
                }
                return Err(Rejection::ReplicasFull);
            }
            *n += 1;
        }
        let mono = self.mono_ms();
        let sub = Arc::new(Subscriber {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            env: env.to_owned(),
            key_id: key_id.to_owned(),
            applied: AtomicU64::new(applied),
            last_progress_ms: AtomicU64::new(mono),
            started_mono_ms: mono,
            sent_revision: AtomicU64::new(applied),
            snapshot_revision: AtomicU64::new(0),
            sent_bytes: AtomicU64::new(0),
            waiting_permit: AtomicBool::new(false),
            head: std::sync::OnceLock::new(),
            behind: Mutex::new(None),
            started_unix_ms: now_ms(),
            wake: AtomicWaker::new(),
            stopped: AtomicBool::new(false),
            failure: Mutex::new(None),
            ended: std::sync::OnceLock::new(),
            conn,
            sdk,
            relay,
            report: Mutex::new(None),
        });
        subs.insert(sub.id, sub.clone());
        Self::lock(&self.by_env).entry(sub.env.clone()).or_default().insert(sub.id, sub.clone());
        Ok(sub)
    }

    /// Removes a subscriber whose stream ended.
    pub(crate) fn leave(&self, sub: &Subscriber, reason: &str) {
        let mut subs = Self::lock(&self.subs);
        if subs.remove(&sub.id).is_none() {
            return;
        }
        // The first reason only: the one counted below.
        let _first = sub.ended.set(reason.to_owned());
        if subs.is_empty() {
            self.emptied.notify_waiters();
        }
        let mut per_env = Self::lock(&self.per_env);
        {
            let mut by_env = Self::lock(&self.by_env);
            if let Some(env) = by_env.get_mut(&sub.env) {
                env.remove(&sub.id);
                if env.is_empty() {
                    by_env.remove(&sub.env);
                }
            }
        }
        if !sub.relay
            && let Some(n) = per_env.get_mut(&sub.env)
        {
            *n = n.saturating_sub(1);
            self.metrics.subscribers.get_or_create(&vec![("env", sub.env.clone())]).set(*n as i64);
        }
        if sub.relay {
            let mut replicas = Self::lock(&self.replicas_per_env);
            if let Some(n) = replicas.get_mut(&sub.env) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    replicas.remove(&sub.env);
                }
            }
        }
        let age_s = self.mono_ms().saturating_sub(sub.started_mono_ms) as f64 / 1000.0;
        self.metrics.stream_age.observe(age_s);
        self.metrics.stream_ends.get_or_create(&vec![("reason", reason.to_owned())]).inc();
    }

    /// Ends every stream of `env` opened with SDK key `key_id` (revoked or
    /// expired) with UNAUTHENTICATED; returns how many.
    pub(crate) fn end_key(&self, env: &str, key_id: &str, why: &str) -> usize {
        let n = self.end_key_where(
            |s| !s.relay && s.env == env && s.key_id == key_id,
            &format!("SDK key {key_id} {why}"),
        );
        if n > 0 {
            tracing::info!(env, key = key_id, streams = n, why, "ended the streams of an SDK key");
        }
        n
    }

    /// Subscribers connected now.
    pub(crate) fn total(&self) -> usize {
        Self::lock(&self.subs).len()
    }

    /// Returns once no subscriber is connected (at once if none is).
    pub(crate) async fn emptied(&self) {
        loop {
            let woken = self.emptied.notified();
            tokio::pin!(woken);
            // Registered before the check: a leave between the two wakes it.
            woken.as_mut().enable();
            if self.total() == 0 {
                return;
            }
            woken.await;
        }
    }

    /// SDK subscribers of one environment now.
    pub(crate) fn count(&self, env: &str) -> usize {
        Self::lock(&self.per_env).get(env).copied().unwrap_or(0)
    }

    /// The replica relays subscribed for `env` now.
    pub(crate) fn relays(&self, env: &str) -> Vec<Arc<Subscriber>> {
        Self::lock(&self.by_env)
            .get(env)
            .into_iter()
            .flat_map(|m| m.values())
            .filter(|s| s.relay)
            .cloned()
            .collect()
    }

    /// Ends every stream opened with the admin token `name` (a replica's
    /// credential that was revoked) with UNAUTHENTICATED.
    pub(crate) fn end_token(&self, name: &str) -> usize {
        self.end_key_where(|s| s.relay && s.key_id == name, &format!("token {name:?} was revoked"))
    }

    fn end_key_where(&self, pick: impl Fn(&Subscriber) -> bool, why: &str) -> usize {
        let subs: Vec<Arc<Subscriber>> =
            Self::lock(&self.subs).values().filter(|s| pick(s)).cloned().collect();
        for s in &subs {
            s.fail(crate::error::Refusal::Revoked(why.to_owned()).into());
        }
        if !subs.is_empty() {
            tracing::info!(streams = subs.len(), why, "ended streams whose credential stopped working");
        }
        subs.len()
    }

    /// Whether `s` has stayed behind the head past the behind deadline
    /// (with its progress credit), sampled now (`now`, monotonic ms); keeps
    /// the stream's record of being behind up to date. Returns how long it
    /// was behind and the bytes it was handed meanwhile when it must be cut.
    fn behind_too_long(&self, s: &Subscriber, now: u64) -> Option<(u64, u64)> {
        // Replica relays are exempt: their link carries every environment
        // they follow, and their lag is in their propagation reports.
        let head = match s.head.get() {
            Some(head) if !s.relay => *head.borrow(),
            _ => return None,
        };
        // A snapshot on its way counts as its revision: behind only once
        // the head moves past it.
        let sent = match s.snapshot_revision.load(Ordering::Relaxed) {
            0 => s.sent_revision.load(Ordering::Relaxed),
            snapshot => snapshot,
        };
        let bytes = s.sent_bytes.load(Ordering::Relaxed);
        let mut behind = Self::lock(&s.behind);
        // Current, the environment deleted, or held back by the relay's own
        // snapshot budget: not behind.
        if sent >= head || head == u64::MAX || s.waiting_permit.load(Ordering::Relaxed) {
            *behind = None;
            return None;
        }
        match *behind {
            // Still not handed the head it was found behind: cut once that
            // has lasted past the deadline plus the credit for the bytes
            // handed to it meanwhile.
            Some(b) if sent < b.target => {
                let for_ms = now.saturating_sub(b.since_ms);
                let handed = bytes.saturating_sub(b.bytes);
                let credit_ms = handed.saturating_mul(1000) / self.limits.behind_progress_rate.max(1);
                let allowed = (self.limits.behind_deadline.as_millis() as u64).saturating_add(credit_ms);
                (for_ms > allowed).then_some((for_ms, handed))
            }
            // Newly behind, or handed what it was behind on while the head
            // moved again: a new period of being behind starts now.
            _ => {
                *behind = Some(Behind { target: head, since_ms: now, bytes });
                None
            }
        }
    }

    /// Cuts off subscribers whose transport has not pulled a message for
    /// longer than one heartbeat plus the send deadline, and SDK
    /// subscribers that stayed behind the head for longer than the behind
    /// deadline plus their progress credit: their connection is closed,
    /// which frees everything the stream held. Runs until `stop`.
    pub(crate) async fn reap(self: Arc<Self>, stop: CancellationToken) {
        let period = Duration::from_secs(1).min(self.limits.send_deadline);
        let allowed = (self.limits.heartbeat + self.limits.send_deadline).as_millis() as u64;
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(period) => {}
            }
            let now = self.mono_ms();
            let mut behind = Vec::new();
            let stuck: Vec<Arc<Subscriber>> = Self::lock(&self.subs)
                .values()
                .filter(|s| {
                    if now.saturating_sub(s.last_progress_ms.load(Ordering::Relaxed)) > allowed {
                        return true;
                    }
                    if let Some(why) = self.behind_too_long(s, now) {
                        behind.push(((*s).clone(), why));
                    }
                    false
                })
                .cloned()
                .collect();
            for (s, (for_ms, handed)) in behind {
                let sent = s.sent_revision.load(Ordering::Relaxed);
                let head = s.head.get().map_or(0, |h| *h.borrow());
                tracing::warn!(
                    env = %s.env,
                    subscriber = s.id,
                    behind_ms = for_ms,
                    sent_revision = sent,
                    head,
                    bytes_handed = handed,
                    "behind deadline passed: subscriber keeps reading but stayed behind the head; closing its connection"
                );
                self.metrics.limit_hit("behind_deadline");
                // Counted under this reason before the stream can end (its
                // own leave, as `client_gone`, is then a no-op).
                self.leave(&s, "behind_deadline");
                s.stop();
                if let Some(conn) = &s.conn {
                    conn.kill.fire();
                }
            }
            for s in stuck {
                tracing::warn!(env = %s.env, subscriber = s.id, "send deadline passed: subscriber stopped reading; closing its connection");
                self.metrics.limit_hit("send_deadline");
                // Counted under this reason before the stream can end.
                self.leave(&s, "send_deadline");
                s.stop();
                if let Some(conn) = &s.conn {
                    conn.kill.fire();
                }
            }
        }
    }
}

impl crate::store::EnvGone for Hub {
    /// A deleted environment's usage (and usage series) go with it.
    fn env_gone(&self, name: &str) {
        self.usage.forget_env(name);
    }
}

pub(crate) mod node;
pub(crate) mod propagation;
mod stats;

#[cfg(test)]
mod tests;
