//! How far each revision has reached, as the hub sees it: the commit→ack
//! latency of this relay's SDK subscribers (per environment, the rings of
//! `crate::stream::hub::propagation`), merged with the latest reports of the replica
//! relays subscribed here and of a shared database's other relays; and the
//! report this relay sends upstream. Who is connected is `hub.rs`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use crate::store::{Env, now_ms};
use crate::stream::hub::propagation::{Histogram, REPORTED_REVISIONS, Report};

use super::{Hub, Subscriber};

/// The longest an ack's `held_us` may move the time its revision was
/// reached back, ms: a client's claim is bounded (the Rust SDK holds an ack
/// at most a second).
pub(crate) const MAX_ACK_HELD_MS: u64 = 60_000;

/// Latency percentiles of one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Propagation {
    /// Subscribers of the environment now.
    pub subscribers: u64,
    /// Of those, how many have applied the revision.
    pub acked: u64,
    /// Acks recorded for the revision (including subscribers since gone).
    pub acks_recorded: u64,
    /// p50 commit → ack, ms.
    pub p50_ms: u64,
    /// p99 commit → ack, ms.
    pub p99_ms: u64,
    /// Slowest, ms.
    pub max_ms: u64,
    /// Commit time of the revision, Unix ms (0 if not tracked).
    pub committed_ms: u64,
    /// Replica relays subscribed here for the environment.
    pub relays_total: u32,
    /// Of those, how many reported on the revision.
    pub relays_reporting: u32,
}

impl Hub {
    /// Replaces the other relays' reports (a shared database's peers).
    pub(crate) fn set_peer_reports(&self, reports: HashMap<String, Vec<Report>>) {
        *Self::lock(&self.peers) = reports;
    }

    /// The latest reports of a shared database's other relays for `env`.
    pub(crate) fn peer_reports(&self, env: &str) -> Vec<Report> {
        // No entry: no peer has reported on this environment yet (none).
        Self::lock(&self.peers).get(env).cloned().unwrap_or_default()
    }

    /// Stores a replica relay's latest report (it replaces the previous).
    pub(crate) fn report(&self, sub: &Subscriber, report: &flagstream_proto::v1::PropagationReport) {
        if sub.relay {
            *Self::lock(&sub.report) =
                Some(Report::from_proto(report, &self.node.id, &sub.env, &self.node.id));
        }
    }

    /// Records an ack of `revision` by `sub` (it has applied everything up
    /// to it), which its client held `held_ms` after applying it (a client
    /// coalescing acks; at most [`MAX_ACK_HELD_MS`] counts). Latency is
    /// measured from the revision's commit time to when it was applied:
    /// the ack's arrival less `held_ms`. The earlier revisions it covers are
    /// recorded as reached then too: never earlier than they were.
    pub(crate) fn ack(&self, env: &Env, sub: &Subscriber, epoch: &str, revision: u64, held_ms: u64) {
        let state = env.state.load();
        if epoch != state.epoch || revision > state.revision {
            return; // not data this relay sent: ignored
        }
        let prev = sub.applied.fetch_max(revision, Ordering::Relaxed);
        // A replica relay's own ack says how far it is (its lag); the
        // latencies are its subscribers', in its reports.
        if revision <= prev || sub.relay {
            return;
        }
        if held_ms > MAX_ACK_HELD_MS {
            // A client's claim past the bound: counted, and taken as the bound.
            self.metrics.limit_hit("ack_held");
        }
        let now = now_ms().saturating_sub(held_ms.min(MAX_ACK_HELD_MS));
        // Only revisions still in the change log (ordered by revision) have
        // a commit time: those after `prev`, up to `revision`.
        let log = &state.log;
        let first = log
            .binary_search_by(|e| {
                if e.revision <= prev { std::cmp::Ordering::Less } else { std::cmp::Ordering::Greater }
            })
            .unwrap_or_else(|at| at);
        let newly = (first..log.len())
            .map(|i| &log[i])
            .take_while(|e| e.revision <= revision)
            // Revisions committed before this stream began were not
            // propagated to it: a new subscriber gives no latency sample.
            .filter(|e| e.committed_unix_ms >= sub.started_unix_ms);
        let mut latest_ms = None;
        let mut stats = Self::lock(&self.stats);
        // Every ack passes here: no allocation once the ring exists.
        let ring = match stats.get_mut(&sub.env) {
            Some(ring) => ring,
            None => stats.entry(sub.env.clone()).or_default(),
        };
        for entry in newly {
            let r = ring.entry(entry.revision, entry.committed_unix_ms);
            let ms = now.saturating_sub(r.committed_ms);
            r.latency.record(ms);
            if entry.revision == revision {
                latest_ms = Some(ms);
            }
        }
        drop(stats);
        // Outside the lock every subscriber's ack takes.
        if let Some(ms) = latest_ms {
            self.metrics.ack_latency.observe(ms as f64 / 1000.0);
        }
    }

    /// Propagation of `revision` in `env` over this relay's subtree: its
    /// own SDK subscribers plus the latest reports of its replica relays.
    pub(crate) fn propagation(&self, env: &str, epoch: &str, revision: u64) -> Propagation {
        let (own, mut reports) = self.own_and_reports(env, epoch);
        // The other relays of a shared database count too.
        reports.extend(
            Self::lock(&self.peers)
                .get(env)
                .into_iter()
                .flatten()
                .filter(|r| r.epoch == epoch)
                .cloned()
                .map(Some),
        );
        let mut subscribers = 0;
        let mut acked = 0;
        for s in &own {
            subscribers += 1;
            if s.applied.load(Ordering::Relaxed) >= revision {
                acked += 1;
            }
        }
        let mut latency = Histogram::default();
        let mut committed_ms = 0;
        if let Some(r) = Self::lock(&self.stats).get(env).and_then(|ring| ring.get(revision)) {
            latency.merge(&r.latency);
            committed_ms = r.committed_ms;
        }
        let relays_total = reports.len() as u32;
        let mut relays_reporting = 0;
        // Reports may say anything: their counts add up saturating.
        for report in reports.iter().flatten() {
            subscribers = report.subscribers.saturating_add(subscribers);
            if let Some((a, h)) = report.revision(revision) {
                relays_reporting += 1;
                acked = a.saturating_add(acked);
                latency.merge(h);
            }
        }
        Propagation {
            subscribers,
            acked,
            acks_recorded: latency.total(),
            p50_ms: latency.percentile(0.50),
            p99_ms: latency.percentile(0.99),
            max_ms: latency.max(),
            committed_ms,
            relays_total,
            relays_reporting,
        }
    }

    /// This relay's SDK subscribers of `env`, and its replica relays'
    /// latest reports about `epoch` (`None`: none yet, or about another
    /// epoch: that replica has not caught up with it).
    fn own_and_reports(&self, env: &str, epoch: &str) -> (Vec<Arc<Subscriber>>, Vec<Option<Report>>) {
        let by_env = Self::lock(&self.by_env);
        let subs = by_env.get(env).into_iter().flat_map(|m| m.values());
        let own = subs.clone().filter(|s| !s.relay).cloned().collect();
        let reports = subs
            .filter(|s| s.relay)
            .map(|s| Self::lock(&s.report).clone().filter(|r| r.epoch == epoch))
            .collect();
        (own, reports)
    }

    /// The report a replica sends its upstream for `env` at `epoch`: its
    /// subtree's SDK count and, for the latest revisions (those it tracks
    /// latencies of, its replicas report, and `recent`: the newest of its
    /// change log, so a replica without SDKs still reports), how many acked
    /// and their merged latencies (PROTOCOL.md §4).
    pub(crate) fn subtree_report(&self, env: &str, epoch: &str, recent: &[u64]) -> Report {
        let (own, reports) = self.own_and_reports(env, epoch);
        let revisions: Vec<(u64, u64)> = {
            let stats = Self::lock(&self.stats);
            // No ring: no SDK of this relay acked on the environment yet.
            // No ring: this relay has no acks for the environment yet (none).
            let mut revs: Vec<(u64, u64)> = stats
                .get(env)
                .map(|ring| ring.latest(REPORTED_REVISIONS).map(|r| (r.revision, r.committed_ms)).collect())
                .unwrap_or_default();
            revs.extend(recent.iter().map(|r| (*r, 0)));
            for report in reports.iter().flatten() {
                revs.extend(report.revisions.iter().map(|(r, _, _)| (*r, 0)));
            }
            revs.sort_unstable();
            revs.dedup_by_key(|r| r.0);
            revs.into_iter().rev().take(REPORTED_REVISIONS).rev().collect()
        };
        // Reports may say anything: their counts add up saturating.
        let subscribers =
            reports.iter().flatten().fold(own.len() as u64, |n, r| n.saturating_add(r.subscribers));
        let stats = Self::lock(&self.stats);
        let ring = stats.get(env);
        // A revision is reported only once every replica below has reported
        // it: else the subtree's count would look complete while it is not.
        let revisions = revisions
            .into_iter()
            .filter_map(|(revision, _)| {
                let mut acked =
                    own.iter().filter(|s| s.applied.load(Ordering::Relaxed) >= revision).count() as u64;
                // Not tracked here (no ack of this relay's SDKs): an empty
                // histogram, the replicas' reports below fill it.
                let mut latency =
                    ring.and_then(|r| r.get(revision)).map(|r| r.latency.clone()).unwrap_or_default();
                for report in &reports {
                    let (a, h) = report.as_ref()?.revision(revision)?;
                    acked = acked.saturating_add(a);
                    latency.merge(h);
                }
                Some((revision, acked, latency))
            })
            .collect();
        Report { epoch: epoch.to_owned(), subscribers, revisions, nodes: Vec::new(), nodes_omitted: 0 }
    }
}
