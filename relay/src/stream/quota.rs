//! Tenant isolation: per-environment quotas and admission rates, so one
//! environment's flood cannot starve the others. Size quotas (flags,
//! segments, snapshot bytes, SDK keys) are checked by the store against
//! the state a write would produce; the token count by the token registry;
//! the subscriber quota by the hub at admission;
//! rates are token buckets (`governor`): writes per environment and per
//! admin token, audit reads per admin token, new subscriptions per
//! environment and relay-wide (the reconnect-storm guard), server-side
//! evaluations per admin token. Every refusal is RESOURCE_EXHAUSTED naming the
//! quota and its setting (rates and subscribers with a
//! `flagstream-retry-after-ms` hint), counted in
//! `flagstream_quota_refusals_total{env, quota}`, and logged with its cause
//! by the refusal layer (`refusal.rs`, rate-limited: a flood cannot fill the
//! disk). Settings are reloaded on SIGHUP.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use tonic::Status;

use crate::error;
use crate::ops::limit::QuotaConfig;
use crate::ops::metrics::Metrics;

fn quota(per_sec: u32) -> Quota {
    let rate = NonZeroU32::new(per_sec.max(1)).unwrap_or(NonZeroU32::MIN);
    let burst = NonZeroU32::new(per_sec.max(1).saturating_mul(2)).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(rate).allow_burst(burst)
}

/// The token buckets of one configuration.
#[derive(Debug)]
struct Buckets {
    cfg: QuotaConfig,
    writes: DefaultKeyedRateLimiter<String>,
    token_writes: DefaultKeyedRateLimiter<String>,
    subscribes: DefaultKeyedRateLimiter<String>,
    relay_subscribes: DefaultDirectRateLimiter,
    token_evaluates: DefaultKeyedRateLimiter<String>,
    audit_reads: DefaultKeyedRateLimiter<String>,
    usage_reads: DefaultKeyedRateLimiter<String>,
    /// Where the queue of refused subscribers ends, per environment and
    /// relay-wide (see [`Turns`]).
    turns: Turns,
}

/// Queue positions for refused subscriptions. A refused caller is told to
/// come back at its turn: the end of the queue, which then moves one
/// token's time (1/rate) later. A storm of refusals thus gets hints spread
/// at the admission rate (the k-th refused caller waits about k/rate)
/// instead of all being told "the next token" and returning together.
/// Turns are microseconds on a monotonic clock; a queue that has drained
/// (its end in the past) starts again from now, and its end never runs
/// more than [`MAX_TURN`] ahead (callers that never come back cannot push
/// everyone else's hint to the cap for long). Bounded: one entry per
/// environment that exists (pruned with the buckets) plus the relay's.
#[derive(Debug)]
struct Turns {
    started: std::time::Instant,
    ends: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

/// The furthest ahead a turn is given (the SDK's cap on hints).
const MAX_TURN: Duration = Duration::from_secs(60);

impl Turns {
    fn new() -> Turns {
        Turns { started: std::time::Instant::now(), ends: Default::default() }
    }

    fn now_us(&self) -> u64 {
        self.started.elapsed().as_micros() as u64
    }

    /// The wait to give a caller refused by `key`'s bucket of `per_sec`,
    /// at least `floor` (the bucket's own next token), at most
    /// [`MAX_TURN`].
    fn take(&self, key: &str, per_sec: u32, floor: Duration) -> Duration {
        let now = self.now_us();
        let step = (1_000_000 / u64::from(per_sec.max(1))).max(1);
        let cap = now + MAX_TURN.as_micros() as u64;
        let mut ends = self.ends.lock().unwrap_or_else(|p| p.into_inner());
        let end = match ends.get_mut(key) {
            Some(end) => end,
            None => ends.entry(key.to_owned()).or_insert(now),
        };
        let turn = (*end).max(now + floor.as_micros() as u64).min(cap);
        *end = (turn + step).min(cap);
        Duration::from_micros(turn - now)
    }

    fn prune(&self) {
        let now = self.now_us();
        self.ends.lock().unwrap_or_else(|p| p.into_inner()).retain(|_, end| *end > now);
    }
}

impl Buckets {
    fn new(cfg: QuotaConfig) -> Buckets {
        Buckets {
            cfg,
            writes: RateLimiter::keyed(quota(cfg.writes_per_sec)),
            token_writes: RateLimiter::keyed(quota(cfg.token_writes_per_sec)),
            subscribes: RateLimiter::keyed(quota(cfg.subscribes_per_sec)),
            relay_subscribes: RateLimiter::direct(quota(cfg.relay_subscribes_per_sec)),
            token_evaluates: RateLimiter::keyed(quota(cfg.token_evaluates_per_sec)),
            audit_reads: RateLimiter::keyed(quota(cfg.audit_reads_per_sec)),
            usage_reads: RateLimiter::keyed(quota(cfg.usage_reads_per_sec)),
            turns: Turns::new(),
        }
    }
}

/// The rate quotas in force; cheap to share.
#[derive(Debug)]
pub(crate) struct Quotas {
    buckets: ArcSwap<Buckets>,
    metrics: Metrics,
}

impl Quotas {
    /// Quotas per `cfg`.
    pub(crate) fn new(cfg: QuotaConfig, metrics: Metrics) -> Quotas {
        Quotas { buckets: ArcSwap::from_pointee(Buckets::new(cfg)), metrics }
    }

    /// Applies new settings (SIGHUP). A change replaces every bucket
    /// (they start full: at most one extra burst); no change keeps them.
    pub(crate) fn reload(&self, cfg: QuotaConfig) {
        if self.buckets.load().cfg == cfg {
            return;
        }
        self.buckets.store(Arc::new(Buckets::new(cfg)));
        tracing::info!(?cfg, "quotas reloaded");
    }

    /// Counts a refusal and makes its status (the refusal layer logs it).
    pub(crate) fn refuse(&self, env: &str, quota: &str, message: String, retry: Option<Duration>) -> Status {
        self.metrics.quota_refusal(env, quota);
        match retry {
            // The hint: the bucket's next token or, for subscriptions, the
            // caller's turn in the queue of refused ones; at least 1 ms.
            Some(wait) => error::retry_later(&message, (wait.as_millis() as u64).max(1)),
            None => error::Refusal::OverLimit(message).into(),
        }
    }

    /// Forgets buckets that are full again (keys not seen lately), so the
    /// keyed limiters' memory stays bounded by recent use.
    pub(crate) fn prune(&self) {
        let b = self.buckets.load();
        for l in
            [&b.writes, &b.token_writes, &b.subscribes, &b.token_evaluates, &b.audit_reads, &b.usage_reads]
        {
            l.retain_recent();
            l.shrink_to_fit();
        }
        b.turns.prune();
    }

    /// A write to `env` by `token`: both buckets must have room. Called only
    /// for environments that exist (bucket keys stay bounded).
    pub(crate) fn check_write(&self, env: &str, token: &str) -> Result<(), Status> {
        let b = self.buckets.load();
        let now = DefaultClock::default().now();
        if let Err(not_until) = b.writes.check_key(&env.to_owned()) {
            let msg = format!(
                "environment {env:?}: over its write rate of {}/s (quota-writes-per-sec)",
                b.cfg.writes_per_sec
            );
            return Err(self.refuse(env, "writes_per_sec", msg, Some(not_until.wait_time_from(now))));
        }
        if let Err(not_until) = b.token_writes.check_key(&token.to_owned()) {
            let msg = format!(
                "token {token:?}: over its write rate of {}/s (quota-token-writes-per-sec)",
                b.cfg.token_writes_per_sec
            );
            return Err(self.refuse(env, "token_writes_per_sec", msg, Some(not_until.wait_time_from(now))));
        }
        Ok(())
    }

    /// An audit read (a `ListAudit` page or a `VerifyAudit` walk) of `env`
    /// by `token`: the token's bucket must have room. Keyed by token (the
    /// number of tokens is capped by `quota-tokens`), counted under `env`.
    pub(crate) fn check_audit_read(&self, env: &str, token: &str) -> Result<(), Status> {
        let b = self.buckets.load();
        let now = DefaultClock::default().now();
        if let Err(not_until) = b.audit_reads.check_key(&token.to_owned()) {
            let msg = format!(
                "token {token:?}: over its audit read rate of {}/s (quota-audit-reads-per-sec)",
                b.cfg.audit_reads_per_sec
            );
            return Err(self.refuse(env, "audit_reads_per_sec", msg, Some(not_until.wait_time_from(now))));
        }
        Ok(())
    }

    /// A usage read (a `GetUsage` page) of `env` by `token`, as
    /// [`Quotas::check_audit_read`] (`quota-usage-reads-per-sec`).
    pub(crate) fn check_usage_read(&self, env: &str, token: &str) -> Result<(), Status> {
        let b = self.buckets.load();
        let now = DefaultClock::default().now();
        if let Err(not_until) = b.usage_reads.check_key(&token.to_owned()) {
            let msg = format!(
                "token {token:?}: over its usage read rate of {}/s (quota-usage-reads-per-sec)",
                b.cfg.usage_reads_per_sec
            );
            return Err(self.refuse(env, "usage_reads_per_sec", msg, Some(not_until.wait_time_from(now))));
        }
        Ok(())
    }

    /// The admin token quota in force.
    pub(crate) fn max_tokens(&self) -> usize {
        self.buckets.load().cfg.tokens
    }

    /// A new subscription to `env`: the environment's and the relay's
    /// buckets must have room.
    pub(crate) fn check_subscribe(&self, env: &str) -> Result<(), Status> {
        let b = self.buckets.load();
        let now = DefaultClock::default().now();
        if let Err(not_until) = b.relay_subscribes.check() {
            let msg = format!(
                "relay over its rate of new subscriptions, {}/s (max-subscribes-per-sec)",
                b.cfg.relay_subscribes_per_sec
            );
            let turn = b.turns.take("*", b.cfg.relay_subscribes_per_sec, not_until.wait_time_from(now));
            return Err(self.refuse("*", "relay_subscribes_per_sec", msg, Some(turn)));
        }
        if let Err(not_until) = b.subscribes.check_key(&env.to_owned()) {
            let msg = format!(
                "environment {env:?}: over its rate of new subscriptions, {}/s (quota-subscribes-per-sec)",
                b.cfg.subscribes_per_sec
            );
            let turn = b.turns.take(env, b.cfg.subscribes_per_sec, not_until.wait_time_from(now));
            return Err(self.refuse(env, "subscribes_per_sec", msg, Some(turn)));
        }
        Ok(())
    }
}

impl Quotas {
    /// A server-side evaluation in `env` by `token`: the token's bucket
    /// must have room (keyed by token: one token's flood leaves the others
    /// their rate; tokens are a bounded, operator-made set).
    pub(crate) fn check_evaluate(&self, env: &str, token: &str) -> Result<(), Status> {
        let b = self.buckets.load();
        let now = DefaultClock::default().now();
        if let Err(not_until) = b.token_evaluates.check_key(&token.to_owned()) {
            let msg = format!(
                "token {token:?}: over its evaluation rate of {}/s (quota-token-evaluates-per-sec)",
                b.cfg.token_evaluates_per_sec
            );
            return Err(self.refuse(
                env,
                "token_evaluates_per_sec",
                msg,
                Some(not_until.wait_time_from(now)),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_rates_refuse_with_a_hint_and_count() {
        let m = Metrics::new();
        let q = Quotas::new(
            QuotaConfig { writes_per_sec: 2, token_writes_per_sec: 100, ..QuotaConfig::default() },
            m.clone(),
        );
        // A burst of twice the rate, then refusals with a retry hint.
        for _ in 0..4 {
            q.check_write("a", "t").unwrap();
        }
        let e = q.check_write("a", "t").unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("quota-writes-per-sec"), "{}", e.message());
        assert!(e.metadata().get(error::RETRY_AFTER_MS).is_some());
        // Another environment is not affected.
        q.check_write("b", "t").unwrap();
        assert_eq!(m.quota_refusals_for("a", "writes_per_sec"), 1);
        // Evaluations have their own bucket per token.
        for _ in 0..4 {
            q.check_evaluate("a", "t").unwrap();
        }
        q.reload(QuotaConfig { writes_per_sec: 2, token_evaluates_per_sec: 1, ..QuotaConfig::default() });
        q.check_evaluate("a", "t").unwrap();
        q.check_evaluate("a", "t").unwrap();
        let e = q.check_evaluate("a", "t").unwrap_err();
        assert!(e.message().contains("quota-token-evaluates-per-sec"), "{}", e.message());
        assert!(e.metadata().get(error::RETRY_AFTER_MS).is_some());
        assert_eq!(m.quota_refusals_for("a", "token_evaluates_per_sec"), 1);
        q.check_evaluate("a", "other").unwrap();
        // A reload to a higher rate takes effect.
        q.reload(QuotaConfig { writes_per_sec: 100, token_writes_per_sec: 100, ..QuotaConfig::default() });
        q.check_write("a", "t").unwrap();
    }

    fn hint_ms(s: &Status) -> u64 {
        s.metadata().get(error::RETRY_AFTER_MS).unwrap().to_str().unwrap().parse().unwrap()
    }

    /// A storm of refused subscriptions gets turns spread at the admission
    /// rate (the k-th refused waits about k/rate), each environment its
    /// own queue, never more than a minute ahead. At 1/s with a burst of 2
    /// no token refills during the test, so it cannot race the clock.
    #[test]
    fn refused_subscriptions_get_turns_at_the_admission_rate() {
        let q = Quotas::new(
            QuotaConfig {
                subscribes_per_sec: 1,
                relay_subscribes_per_sec: 100_000,
                ..QuotaConfig::default()
            },
            Metrics::new(),
        );
        q.check_subscribe("a").unwrap();
        q.check_subscribe("a").unwrap(); // the burst
        let hints: Vec<u64> = (0..70).map(|_| hint_ms(&q.check_subscribe("a").unwrap_err())).collect();
        assert!(hints[..59].windows(2).all(|w| w[1] >= w[0] + 990), "1 s apart at 1/s: {hints:?}");
        assert!(hints[58] >= 58_000, "the 59th waits ~59 s: {hints:?}");
        assert!(hints[60..].iter().all(|h| *h <= 60_000 && *h >= 59_000), "capped at a minute: {hints:?}");
        // Another environment has its own queue.
        q.check_subscribe("b").unwrap();
        q.check_subscribe("b").unwrap();
        assert!(hint_ms(&q.check_subscribe("b").unwrap_err()) <= 1_000);
    }

    /// Above 1,000/s turns are still 1/rate apart (microsecond steps), so
    /// the relay-wide default of 5,000/s spreads at 5,000/s.
    #[test]
    fn turns_follow_rates_above_a_thousand_per_second() {
        let t = Turns::new();
        let first = t.take("*", 5_000, Duration::ZERO);
        for _ in 0..4_999 {
            t.take("*", 5_000, Duration::ZERO);
        }
        let last = t.take("*", 5_000, Duration::ZERO);
        let spread = last.saturating_sub(first);
        assert!(spread >= Duration::from_millis(950) && spread <= Duration::from_millis(1_100), "{spread:?}");
    }
}
