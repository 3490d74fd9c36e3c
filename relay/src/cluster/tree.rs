//! The relay tree (PROTOCOL.md "Relay tree"): this relay's own entry
//! (version, uptime, memory, streams, per-environment revision and data
//! age), the subtree it reports upstream inside its propagation reports,
//! the whole tree `Admin.Status` and the status page show, and the
//! revision drift between tiers. Who is connected is the hub's; this
//! relay's identity and the bounds of an entry are `node.rs`; checking the
//! entries a report brings and what reports carry besides nodes is
//! `propagation.rs`.

use std::collections::HashMap;

use flagstream_proto::v1 as pb;

use crate::store::Store;
use crate::stream::hub::Hub;
use crate::stream::hub::node::MAX_NODES;

/// This relay's own entry, with the environments `wanted` accepts.
fn own(store: &Store, hub: &Hub, wanted: impl Fn(&str) -> bool) -> pb::RelayNode {
    let me = &hub.node;
    let sample = me.sample(store);
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
        id: me.id.clone(),
        parent_id: String::new(),
        // Unset before the server has bound its listener: the id identifies it.
        name: me.name(),
        role: crate::stream::hub::node::role(store).to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        started_unix_ms: me.started_unix_ms(),
        rss_bytes: sample.rss_bytes,
        streams: hub.total() as u64,
        sampled_unix_ms: sample.unix_ms,
        environments,
    }
}

/// What a relay sends upstream in its report on `env`'s stream: its own
/// entry (only `env`) and its replicas' entries for `env`, at most
/// [`MAX_NODES`], plus how many were left out.
pub(crate) fn subtree(store: &Store, hub: &Hub, env: &str) -> (Vec<pb::RelayNode>, u64) {
    let mut nodes = vec![own(store, hub, |e| e == env)];
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
    let own = own(store, hub, &sees);
    let mut order = vec![own.id.clone()];
    let mut by_id: HashMap<String, pb::RelayNode> = HashMap::from([(own.id.clone(), own)]);
    let envs = store.envs();
    let reports = envs.iter().flat_map(|e| {
        let name = e.meta.load().name.clone();
        let mut reports: Vec<crate::stream::hub::propagation::Report> = hub
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
    use crate::stream::hub::propagation::tests::node_entry as node;

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
