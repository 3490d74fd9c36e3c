//! The relay tree (PROTOCOL.md "Relay tree"): this relay's own entry
//! (version, uptime, memory, streams, per-environment revision and data
//! age), the subtree it reports upstream inside its propagation reports,
//! the whole tree `Admin.Status` and the status page show, and the
//! revision drift between tiers. Who is connected is the hub's; what the
//! reports carry besides nodes is `propagation.rs`.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use flagstream_proto::v1 as pb;

use crate::hub::Hub;
use crate::store::{Source, Store};

/// Entries a report (and the whole tree) holds at most.
pub(crate) const MAX_NODES: usize = 1_000;

/// Longest string a node entry may carry, bytes.
pub(crate) const MAX_NODE_STRING: usize = 256;

/// Environment entries a received node entry may carry (a report's own
/// entries carry one: the stream's environment).
const MAX_NODE_ENVIRONMENTS: usize = 16;

/// How long a sample of memory and data age is reused: reports, which are
/// resent only when they change, change at most this often for them.
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// This relay process as a node of the tree.
#[derive(Debug)]
pub(crate) struct Identity {
    /// Random per process start.
    pub id: String,
    /// `advertise-url`, else the gRPC listen address (set once at start).
    name: OnceLock<String>,
    started_unix_ms: u64,
    /// The latest sample: when (monotonic, and Unix ms), resident bytes,
    /// and each environment's staleness then.
    sample: Mutex<Option<Sample>>,
}

#[derive(Debug, Clone)]
struct Sample {
    at: Instant,
    unix_ms: u64,
    rss_bytes: u64,
    /// Per environment: the revision held then, and its staleness.
    staleness_ms: HashMap<String, (u64, u64)>,
}

impl Default for Identity {
    fn default() -> Self {
        Identity {
            id: crate::secret::new_epoch()[..16].to_owned(),
            name: OnceLock::new(),
            started_unix_ms: crate::store::now_ms(),
            sample: Mutex::new(None),
        }
    }
}

impl Identity {
    /// Sets the name other relays and operators see (first call wins).
    pub(crate) fn set_name(&self, name: String) {
        let mut name = name;
        truncate(&mut name);
        // A second call (a test's relay restarted in-process) keeps the first.
        let _kept = self.name.set(name);
    }

    /// The current sample, taken again when older than [`SAMPLE_EVERY`].
    fn sample(&self, store: &Store) -> Sample {
        let mut slot = self.sample.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = slot.as_ref().filter(|s| s.at.elapsed() < SAMPLE_EVERY) {
            return s.clone();
        }
        let s = Sample {
            at: Instant::now(),
            unix_ms: crate::store::now_ms(),
            rss_bytes: crate::process::resident_bytes(),
            staleness_ms: store
                .envs()
                .iter()
                .map(|e| (e.meta.load().name.clone(), (e.state.load().revision, store.staleness_ms(e))))
                .collect(),
        };
        *slot = Some(s.clone());
        s
    }

    /// This relay's own entry, with the environments `wanted` accepts.
    pub(crate) fn own(&self, store: &Store, hub: &Hub, wanted: impl Fn(&str) -> bool) -> pb::RelayNode {
        let sample = self.sample(store);
        let environments = store
            .envs()
            .iter()
            .filter_map(|e| {
                let s = e.state.load();
                wanted(&s.name).then(|| pb::NodeEnvironment {
                    name: s.name.clone(),
                    epoch: s.epoch.clone(),
                    revision: s.revision,
                    // The sample's, unless the environment has moved since
                    // (new data, or new since the sample): then read now.
                    staleness_ms: match sample.staleness_ms.get(&s.name) {
                        Some((revision, ms)) if *revision == s.revision => *ms,
                        _ => store.staleness_ms(e),
                    },
                    subscribers: hub.count(&s.name) as u64,
                })
            })
            .collect();
        pb::RelayNode {
            id: self.id.clone(),
            parent_id: String::new(),
            // Unset before the server has bound its listener: the id identifies it.
            name: self.name.get().cloned().unwrap_or_default(),
            role: role(store).to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            started_unix_ms: self.started_unix_ms,
            rss_bytes: sample.rss_bytes,
            streams: hub.total() as u64,
            sampled_unix_ms: sample.unix_ms,
            environments,
        }
    }
}

/// The role name a node entry carries.
fn role(store: &Store) -> &'static str {
    match store.source() {
        Source::Primary => "primary",
        Source::Replica { .. } => "replica",
        Source::Shared => "shared",
    }
}

fn truncate(s: &mut String) {
    if s.len() > MAX_NODE_STRING {
        let mut end = MAX_NODE_STRING;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

/// The entries of a report received on `env`'s stream (or a shared
/// database's row for `env`) this relay keeps: at most [`MAX_NODES`], each
/// well formed (non-empty id, strings within [`MAX_NODE_STRING`], at most
/// [`MAX_NODE_ENVIRONMENTS`] environments, only `env` among them), none
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

/// What a relay sends upstream in its report on `env`'s stream: its own
/// entry (only `env`) and its replicas' entries for `env`, at most
/// [`MAX_NODES`], plus how many were left out.
pub(crate) fn subtree(store: &Store, hub: &Hub, env: &str) -> (Vec<pb::RelayNode>, u64) {
    let mut nodes = vec![hub.node.own(store, hub, |e| e == env)];
    let mut omitted = 0u64;
    for sub in hub.relays(env) {
        let report = sub.report.lock().unwrap_or_else(|p| p.into_inner());
        let Some(report) = report.as_ref() else { continue };
        omitted = omitted.saturating_add(report.nodes_omitted);
        for n in &report.nodes {
            if nodes.len() < MAX_NODES {
                nodes.push(n.clone());
            } else {
                omitted = omitted.saturating_add(1);
            }
        }
    }
    (nodes, omitted)
}

/// The whole tree as this relay knows it, for `Admin.Status` and the status
/// page: its own entry first (environments `sees` accepts), then every
/// entry its replicas (and, on a shared database, its peers) reported,
/// merged per relay (the union of its environments; the newest sample
/// wins), at most [`MAX_NODES`]; and how many were left out.
pub(crate) fn whole(store: &Store, hub: &Hub, sees: impl Fn(&str) -> bool) -> (Vec<pb::RelayNode>, u64) {
    let own = hub.node.own(store, hub, &sees);
    let mut order = vec![own.id.clone()];
    let mut by_id: HashMap<String, pb::RelayNode> = HashMap::from([(own.id.clone(), own)]);
    let envs = store.envs();
    let reports = envs.iter().flat_map(|e| {
        let name = e.meta.load().name.clone();
        let mut reports: Vec<crate::propagation::Report> = hub
            .relays(&name)
            .iter()
            .filter_map(|s| s.report.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .collect();
        reports.extend(hub.peer_reports(&name));
        reports
    });
    // A sender reports its subtree once per environment: what it left out
    // counts once (its largest figure), and so does a relay past the bound.
    let mut left_out: HashMap<String, u64> = HashMap::new();
    let mut overflow: std::collections::HashSet<String> = std::collections::HashSet::new();
    let mut unattributed = 0u64;
    for report in reports {
        match report.nodes.first() {
            Some(sender) => {
                let held = left_out.entry(sender.id.clone()).or_default();
                *held = (*held).max(report.nodes_omitted);
            }
            // No entry kept to tell whose: counted as it is.
            None => unattributed = unattributed.saturating_add(report.nodes_omitted),
        }
        for mut n in report.nodes {
            n.environments.retain(|e| sees(&e.name));
            match by_id.get_mut(&n.id) {
                Some(held) => merge(held, n),
                None if order.len() < MAX_NODES => {
                    order.push(n.id.clone());
                    by_id.insert(n.id.clone(), n);
                }
                None => {
                    overflow.insert(n.id);
                }
            }
        }
    }
    let omitted = left_out
        .values()
        .fold(overflow.len() as u64, |a, b| a.saturating_add(*b))
        .saturating_add(unattributed);
    (order.iter().filter_map(|id| by_id.remove(id)).collect(), omitted)
}

/// Folds another report's entry for the same relay into `held`.
fn merge(held: &mut pb::RelayNode, n: pb::RelayNode) {
    let newer = n.sampled_unix_ms > held.sampled_unix_ms;
    let mut envs = std::mem::take(&mut held.environments);
    for e in n.environments.iter() {
        match envs.iter_mut().find(|h| h.name == e.name) {
            Some(h) if newer => *h = e.clone(),
            Some(_) => {}
            None => envs.push(e.clone()),
        }
    }
    if newer {
        let parent = std::mem::take(&mut held.parent_id);
        *held = pb::RelayNode { environments: Vec::new(), ..n };
        if held.parent_id.is_empty() {
            held.parent_id = parent;
        }
    }
    envs.sort_by(|a, b| a.name.cmp(&b.name));
    held.environments = envs;
}

/// Revision drift per environment: this relay's head minus the oldest
/// revision any relay of the tree holds at the same epoch (0 when every
/// relay is current; a relay at another epoch is resyncing and left out).
pub(crate) fn drift(store: &Store, hub: &Hub) -> Vec<(String, u64)> {
    let (nodes, _) = whole(store, hub, |_| true);
    store
        .envs()
        .iter()
        .map(|e| {
            let s = e.state.load();
            let oldest = nodes
                .iter()
                .flat_map(|n| n.environments.iter())
                .filter(|ne| ne.name == s.name && ne.epoch == s.epoch)
                .map(|ne| ne.revision)
                .min()
                .unwrap_or(s.revision);
            (s.name.clone(), s.revision.saturating_sub(oldest))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: &str, parent: &str, sampled: u64, envs: &[(&str, u64)]) -> pb::RelayNode {
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
        let mut nodes = vec![node("a", "", 1, &[]), node("b", "a", 1, &[]), node("", "a", 1, &[])];
        nodes.push(pb::RelayNode { name: "x".repeat(MAX_NODE_STRING + 1), ..node("c", "a", 1, &[]) });
        nodes.extend((0..MAX_NODES + 5).map(|i| node(&format!("n{i}"), "a", 1, &[])));
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
            node("a", "elsewhere", 1, &[("prod", 3)]),
            node("b", "a", 1, &[("prod", 3)]),
            node("c", "b", 1, &[("prod", 3)]),
            node("x", "nowhere", 1, &[("prod", 3)]),
            node("root", "a", 1, &[("prod", 3)]),
            node("b", "c", 1, &[("prod", 3)]),
            node("d", "a", 1, &[("staging", 9)]),
            node("e", "x", 1, &[("prod", 3)]),
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

    /// One relay reported on two environments' streams is one entry with
    /// both environments; the newer sample's fields win.
    #[test]
    fn entries_of_one_relay_merge() {
        let mut held = node("a", "root", 10, &[("prod", 5)]);
        merge(
            &mut held,
            pb::RelayNode { rss_bytes: 99, ..node("a", "root", 20, &[("dev", 3), ("prod", 6)]) },
        );
        assert_eq!(held.rss_bytes, 99);
        let envs: Vec<_> = held.environments.iter().map(|e| (e.name.as_str(), e.revision)).collect();
        assert_eq!(envs, [("dev", 3), ("prod", 6)]);
        merge(&mut held, pb::RelayNode { rss_bytes: 1, ..node("a", "root", 15, &[("prod", 4), ("qa", 1)]) });
        assert_eq!(held.rss_bytes, 99, "an older sample does not win");
        let envs: Vec<_> = held.environments.iter().map(|e| (e.name.as_str(), e.revision)).collect();
        assert_eq!(envs, [("dev", 3), ("prod", 6), ("qa", 1)]);
    }
}
