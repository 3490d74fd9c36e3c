//! Propagation statistics (PROTOCOL.md §4): for the latest revisions of
//! each environment, the commit→ack latency of this relay's SDK
//! subscribers in a mergeable log-linear histogram, and the merge with the
//! reports replica relays send up the tree. Owns the histogram and the
//! per-revision rings; who is connected is the hub's.

use std::collections::VecDeque;

use flagstream_proto::v1 as pb;

use crate::stream::hub::node::{MAX_NODE_ENVIRONMENTS, MAX_NODE_STRING, MAX_NODES};

/// Revisions per environment whose statistics are kept.
pub(crate) const TRACKED_REVISIONS: usize = 256;

/// Revisions a replica reports upstream (PROTOCOL.md §4: at most 64).
pub(crate) const REPORTED_REVISIONS: usize = 64;

/// Bucket index of a millisecond value: exact below 16 ms, then 8 buckets
/// per power of two (each at most 1/8 of its lower bound wide).
pub(crate) fn bucket_index(v: u64) -> usize {
    if v < 16 {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros());
    (16 + 8 * (e - 4) + ((v >> (e - 3)) & 7)) as usize
}

/// The largest value in bucket `i` (inclusive upper bound).
pub(crate) fn bucket_upper(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let e = 4 + (i as u64 - 16) / 8;
    let m = (i as u64 - 16) % 8;
    let upper = (u128::from(9 + m) << (e - 3)) - 1;
    u64::try_from(upper).unwrap_or(u64::MAX)
}

/// A latency histogram in PROTOCOL.md §4's layout, dense by index (at most
/// ~500 buckets for any u64 value).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Histogram {
    /// Adds one sample.
    pub(crate) fn record(&mut self, ms: u64) {
        let i = bucket_index(ms);
        if self.counts.len() <= i {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] = self.counts[i].saturating_add(1);
        self.total = self.total.saturating_add(1);
        self.max = self.max.max(ms);
    }

    /// Adds another histogram's counts (saturating: counts come from
    /// replicas' reports, which may say anything).
    pub(crate) fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a = a.saturating_add(*b);
        }
        self.total = self.total.saturating_add(other.total);
        self.max = self.max.max(other.max);
    }

    /// Samples recorded.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// The largest sample (exact).
    pub(crate) fn max(&self) -> u64 {
        self.max
    }

    /// Percentile `q`: the upper bound of the first bucket whose cumulative
    /// count reaches `ceil(q · N)`, capped at the exact maximum; 0 when
    /// empty.
    pub(crate) fn percentile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.counts.iter().enumerate() {
            seen = n.saturating_add(seen);
            if seen >= want {
                return bucket_upper(i).min(self.max);
            }
        }
        self.max
    }

    /// The sparse wire form.
    pub(crate) fn to_buckets(&self) -> Vec<pb::LatencyBucket> {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .map(|(i, n)| pb::LatencyBucket { index: i as u32, count: *n })
            .collect()
    }

    /// From the sparse wire form; indexes beyond any u64 value are ignored,
    /// counts are added saturating (a report may say anything).
    pub(crate) fn from_buckets(buckets: &[pb::LatencyBucket], max: u64) -> Histogram {
        let mut h = Histogram { max, ..Histogram::default() };
        for b in buckets {
            let i = b.index as usize;
            if i > bucket_index(u64::MAX) {
                continue;
            }
            if h.counts.len() <= i {
                h.counts.resize(i + 1, 0);
            }
            h.counts[i] = h.counts[i].saturating_add(b.count);
            h.total = h.total.saturating_add(b.count);
        }
        h
    }
}

/// One revision's latency samples at this relay.
#[derive(Debug, Clone)]
pub(crate) struct RevisionStats {
    /// The revision.
    pub revision: u64,
    /// Its commit time on the primary, Unix ms.
    pub committed_ms: u64,
    /// Commit→ack latencies of this relay's own SDK subscribers.
    pub latency: Histogram,
}

/// The latest revisions' statistics of one environment, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Ring {
    revisions: VecDeque<RevisionStats>,
}

impl Ring {
    /// The statistics of `revision`, created if new (dropping the oldest
    /// beyond [`TRACKED_REVISIONS`]).
    pub(crate) fn entry(&mut self, revision: u64, committed_ms: u64) -> &mut RevisionStats {
        let pos = match self.revisions.iter().rposition(|r| r.revision == revision) {
            Some(p) => p,
            None => {
                // Keep the ring ordered by revision (acks may record an
                // older revision after a newer one).
                let at = self.revisions.partition_point(|r| r.revision < revision);
                self.revisions
                    .insert(at, RevisionStats { revision, committed_ms, latency: Histogram::default() });
                if self.revisions.len() > TRACKED_REVISIONS {
                    self.revisions.pop_front();
                    at.saturating_sub(1)
                } else {
                    at
                }
            }
        };
        &mut self.revisions[pos]
    }

    /// The statistics of `revision`, if tracked.
    pub(crate) fn get(&self, revision: u64) -> Option<&RevisionStats> {
        self.revisions.iter().rev().find(|r| r.revision == revision)
    }

    /// The newest `n` tracked revisions, oldest first.
    pub(crate) fn latest(&self, n: usize) -> impl Iterator<Item = &RevisionStats> {
        self.revisions.iter().skip(self.revisions.len().saturating_sub(n))
    }
}

/// A replica's latest report, as the relay it reports to keeps it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    /// Epoch the report is about.
    pub epoch: String,
    /// SDK subscribers in the replica's subtree.
    pub subscribers: u64,
    /// Per revision: acked count and latency histogram.
    pub revisions: Vec<(u64, u64, Histogram)>,
    /// The relays of the reporting subtree (`crate::cluster::tree`), parents set.
    pub nodes: Vec<pb::RelayNode>,
    /// Entries the subtree left out ([`received`]).
    pub nodes_omitted: u64,
}

impl Report {
    /// From the wire form, as received by the relay `parent` (empty for a
    /// shared database's peer: a root of the tree).
    /// A report received on `env`'s stream by relay `own` (its tree
    /// entries kept as [`received`] says; `parent`: the id the
    /// sender's own entry hangs below).
    pub(crate) fn from_proto(r: &pb::PropagationReport, parent: &str, env: &str, own: &str) -> Report {
        let (nodes, nodes_omitted) = received(r, parent, env, own);
        Report {
            nodes,
            nodes_omitted,
            epoch: r.epoch.clone(),
            subscribers: r.subscribers,
            revisions: r
                .revisions
                .iter()
                .take(REPORTED_REVISIONS)
                .map(|p| (p.revision, p.acked, Histogram::from_buckets(&p.latency, p.max_latency_ms)))
                .collect(),
        }
    }

    /// The entry for `revision`: acked and latency.
    pub(crate) fn revision(&self, revision: u64) -> Option<(u64, &Histogram)> {
        self.revisions.iter().find(|(r, _, _)| *r == revision).map(|(_, a, h)| (*a, h))
    }

    /// The wire form (the propagation part: a sender adds its subtree's
    /// nodes, `crate::cluster::tree::subtree`).
    pub(crate) fn to_proto(&self) -> pb::PropagationReport {
        pb::PropagationReport {
            nodes: Vec::new(),
            nodes_omitted: 0,
            epoch: self.epoch.clone(),
            subscribers: self.subscribers,
            revisions: self
                .revisions
                .iter()
                .map(|(revision, acked, h)| pb::RevisionPropagation {
                    revision: *revision,
                    acked: *acked,
                    latency: h.to_buckets(),
                    max_latency_ms: h.max(),
                })
                .collect(),
        }
    }
}

/// The entries of a report received on `env`'s stream (or a shared
/// database's row for `env`) this relay keeps: at most [`MAX_NODES`](crate::stream::hub::node::MAX_NODES), each
/// well formed (non-empty id, strings within [`MAX_NODE_STRING`](crate::stream::hub::node::MAX_NODE_STRING), at most
/// [`MAX_NODE_ENVIRONMENTS`](crate::stream::hub::node::MAX_NODE_ENVIRONMENTS) environments, only `env` among them), none
/// claiming this relay's id (`own`) or an id twice. The first entry is the
/// sender's own: its parent is set to `parent` (the receiving relay; empty
/// for a shared database's peer, a root). Every later entry must hang
/// below an entry kept before it in the same report, so a sender can place
/// relays only inside its own subtree. Returns them and how many were left
/// out, plus what the sender says it left out.
pub(crate) fn received(
    r: &pb::PropagationReport,
    parent: &str,
    env: &str,
    own: &str,
) -> (Vec<pb::RelayNode>, u64) {
    let mut omitted = r.nodes_omitted;
    let mut nodes: Vec<pb::RelayNode> = Vec::with_capacity(r.nodes.len().min(MAX_NODES));
    let mut ids: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for (i, n) in r.nodes.iter().enumerate() {
        let strings_ok =
            [&n.id, &n.parent_id, &n.name, &n.role, &n.version].iter().all(|s| s.len() <= MAX_NODE_STRING)
                && n.environments
                    .iter()
                    .all(|e| e.name.len() <= MAX_NODE_STRING && e.epoch.len() <= MAX_NODE_STRING);
        let placed = i == 0 || ids.contains(n.parent_id.as_str());
        if nodes.len() >= MAX_NODES
            || n.id.is_empty()
            || n.id == own
            || ids.contains(n.id.as_str())
            || !placed
            || !strings_ok
            || n.environments.len() > MAX_NODE_ENVIRONMENTS
            || n.environments.iter().any(|e| e.name != env)
        {
            omitted = omitted.saturating_add(1);
            continue;
        }
        ids.insert(n.id.as_str());
        let mut n = n.clone();
        if i == 0 {
            n.parent_id = parent.to_owned();
        }
        nodes.push(n);
    }
    (nodes, omitted)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The layout of PROTOCOL.md §4: exact below 16, then eight buckets per
    /// power of two, each bucket's bounds as specified.
    #[test]
    fn bucket_layout_matches_the_protocol() {
        for v in 0..16 {
            assert_eq!(bucket_index(v), v as usize);
            assert_eq!(bucket_upper(v as usize), v);
        }
        assert_eq!(bucket_index(16), 16);
        assert_eq!(bucket_index(17), 16);
        assert_eq!(bucket_index(18), 17);
        assert_eq!(bucket_upper(16), 17);
        assert_eq!(bucket_index(31), 23);
        assert_eq!(bucket_index(32), 24);
        assert_eq!(bucket_upper(24), 35);
        // Every value lies within its bucket, at most 1/8 wide.
        for v in [16u64, 100, 1000, 12_345, 1 << 40, u64::MAX] {
            let i = bucket_index(v);
            assert!(v <= bucket_upper(i), "{v}");
            if i > 16 {
                assert!(v > bucket_upper(i - 1), "{v}");
            }
        }
    }

    /// Merged histograms give the percentiles of the union, within the
    /// bucket width (12.5 %).
    /// Counts a report may hold (anything up to u64::MAX, repeated) add up
    /// saturating: no overflow panic in a debug build, no wrap to small.
    #[test]
    fn counts_from_reports_saturate() {
        let huge = |index| pb::LatencyBucket { index, count: u64::MAX };
        let mut h = Histogram::from_buckets(&[huge(3), huge(3), huge(7)], 9);
        assert_eq!(h.total(), u64::MAX);
        h.merge(&h.clone());
        h.record(5);
        assert_eq!(h.total(), u64::MAX);
        assert_eq!(h.percentile(0.99), 3);
    }

    #[test]
    fn merged_percentiles_are_within_a_bucket() {
        let (mut a, mut b) = (Histogram::default(), Histogram::default());
        for v in 1..=500u64 {
            a.record(v);
        }
        for v in 501..=1000u64 {
            b.record(v);
        }
        let wire = Histogram::from_buckets(&b.to_buckets(), b.max());
        a.merge(&wire);
        assert_eq!(a.total(), 1000);
        let p50 = a.percentile(0.5);
        assert!((500..=563).contains(&p50), "{p50}");
        let p99 = a.percentile(0.99);
        assert!((990..=1000).contains(&p99), "{p99}");
        assert_eq!(a.percentile(1.0), 1000, "capped at the exact maximum");
    }

    /// A relay-tree entry for tests (also `tree.rs`'s).
    pub(crate) fn node_entry(id: &str, parent: &str, sampled: u64, envs: &[(&str, u64)]) -> pb::RelayNode {
        pb::RelayNode {
            id: id.into(),
            parent_id: parent.into(),
            sampled_unix_ms: sampled,
            environments: envs
                .iter()
                .map(|(n, r)| pb::NodeEnvironment { name: (*n).into(), revision: *r, ..Default::default() })
                .collect(),
            ..Default::default()
        }
    }
    /// A relay's own entry gets the receiver as parent; an entry from
    /// further down keeps its parent; malformed entries and entries past
    /// the bound are left out and counted with what the sender left out.
    #[test]
    fn received_entries_are_bounded_and_parented() {
        let mut nodes =
            vec![node_entry("a", "", 1, &[]), node_entry("b", "a", 1, &[]), node_entry("", "a", 1, &[])];
        nodes.push(pb::RelayNode { name: "x".repeat(MAX_NODE_STRING + 1), ..node_entry("c", "a", 1, &[]) });
        nodes.extend((0..MAX_NODES + 5).map(|i| node_entry(&format!("n{i}"), "a", 1, &[])));
        let r = pb::PropagationReport { nodes, nodes_omitted: 7, ..Default::default() };
        let (kept, omitted) = received(&r, "root", "prod", "root");
        assert_eq!(kept.len(), MAX_NODES);
        assert_eq!(kept[0].parent_id, "root");
        assert_eq!(kept[1].parent_id, "a");
        assert_eq!(omitted, 7 + 2 + 7, "sender's 7, two malformed, seven past the bound");
    }

    /// A sender cannot place entries outside its own subtree, claim the
    /// receiver's id or an id twice, or report other environments than the
    /// stream's.
    #[test]
    fn received_entries_stay_in_the_senders_subtree() {
        let nodes = vec![
            node_entry("a", "elsewhere", 1, &[("prod", 3)]),
            node_entry("b", "a", 1, &[("prod", 3)]),
            node_entry("c", "b", 1, &[("prod", 3)]),
            node_entry("x", "nowhere", 1, &[("prod", 3)]),
            node_entry("root", "a", 1, &[("prod", 3)]),
            node_entry("b", "c", 1, &[("prod", 3)]),
            node_entry("d", "a", 1, &[("staging", 9)]),
            node_entry("e", "x", 1, &[("prod", 3)]),
        ];
        let r = pb::PropagationReport { nodes, ..Default::default() };
        let (kept, omitted) = received(&r, "root", "prod", "root");
        let ids: Vec<_> = kept.iter().map(|n| (n.id.as_str(), n.parent_id.as_str())).collect();
        assert_eq!(ids, [("a", "root"), ("b", "a"), ("c", "b")]);
        assert_eq!(
            omitted, 5,
            "a foreign parent, the receiver's id, a repeated id, another environment, below a dropped one"
        );
    }
}
