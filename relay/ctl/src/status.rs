//! `flagctl status`: the relay's health, role, revisions and subscribers.

use std::time::Duration;

use flagstream_proto::v1 as pb;

use crate::conn::Conn;
use crate::failure::CmdResult;
use crate::output::{Output, print_data};

pub(crate) async fn status(conn: &mut Conn) -> CmdResult {
    let s = conn.admin.status(pb::StatusRequest {}).await?.into_inner();
    let replica = s.role == pb::RelayRole::Replica as i32;
    let role = match pb::RelayRole::try_from(s.role) {
        Ok(pb::RelayRole::Replica) => "replica",
        Ok(pb::RelayRole::Shared) => "shared database",
        _ => "primary",
    };
    let staleness = |e: &pb::EnvironmentStatus| {
        if !replica {
            "-".to_owned()
        } else if e.upstream_live {
            format!("live ({:?})", Duration::from_millis(e.staleness_ms))
        } else {
            format!("DOWN, data {:?} old", Duration::from_millis(e.staleness_ms - e.staleness_ms % 1000))
        }
    };
    match conn.output {
        Output::Table => {
            println!(
                "relay     {} ({role}, version {}, {})",
                conn.relay,
                s.version,
                if s.ready { "ready" } else { "not ready" }
            );
            if replica {
                println!("upstream  {}", s.upstream);
            }
            if !s.primary.is_empty() {
                println!("primary   {}", s.primary);
            }
            println!("uptime    {:?}", Duration::from_millis(s.uptime_ms));
            println!("subscribers {}", s.subscribers_total);
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::NOTHING);
            t.set_header(["ENVIRONMENT", "HEAD", "SUBSCRIBERS", "REPLICAS", "UPSTREAM", "CHECKSUM"]);
            for e in &s.environments {
                t.add_row([
                    e.name.clone(),
                    e.head_revision.to_string(),
                    e.subscribers.to_string(),
                    e.relay_subscribers.to_string(),
                    staleness(e),
                    format!("{:016x}", e.checksum),
                ]);
            }
            println!("{t}");
            let replicas: Vec<_> =
                s.environments.iter().flat_map(|e| e.replicas.iter().map(move |r| (&e.name, r))).collect();
            if !replicas.is_empty() {
                let mut t = comfy_table::Table::new();
                t.load_preset(comfy_table::presets::NOTHING);
                t.set_header(["REPLICA", "ENVIRONMENT", "APPLIED", "LAG", "SDKS BELOW", "TOKEN", "VERSION"]);
                for (env, r) in replicas {
                    t.add_row([
                        r.address.clone(),
                        env.clone(),
                        r.applied_revision.to_string(),
                        format!("{} revisions", r.lag_revisions),
                        r.subtree_subscribers.to_string(),
                        r.token.clone(),
                        r.version.clone(),
                    ]);
                }
                println!("{t}");
            }
        }
        o => {
            let envs: Vec<_> = s
                .environments
                .iter()
                .map(|e| {
                    let replicas: Vec<_> = e
                        .replicas
                        .iter()
                        .map(|r| serde_json::json!({"address": r.address, "applied_revision": r.applied_revision, "lag_revisions": r.lag_revisions, "subtree_subscribers": r.subtree_subscribers, "token": r.token, "version": r.version}))
                        .collect();
                    serde_json::json!({"name": e.name, "head_revision": e.head_revision, "subscribers": e.subscribers, "checksum": format!("{:016x}", e.checksum), "staleness_ms": e.staleness_ms, "upstream_live": e.upstream_live, "replicas": replicas})
                })
                .collect();
            print_data(
                o,
                &serde_json::json!({"relay": conn.relay, "role": role, "ready": s.ready, "version": s.version, "upstream": s.upstream, "primary": s.primary, "subscribers": s.subscribers_total, "environments": envs}),
            )?;
        }
    }
    Ok(())
}

/// `flagctl status --tree`: every relay the connected one knows of, in tree
/// order, one row per relay and environment.
pub(crate) async fn tree(conn: &mut Conn) -> CmdResult {
    let s = conn.admin.status(pb::StatusRequest {}).await?.into_inner();
    if s.tree.is_empty() {
        return Err(crate::failure::Failure::new(
            crate::failure::exit::ERROR,
            "the relay returned no tree: the token must see every environment (or the relay predates the relay tree)",
        ));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    // Lag is against the connected relay's head, at its epoch.
    let lag = |e: &pb::NodeEnvironment| {
        s.environments
            .iter()
            .find(|h| h.name == e.name && h.epoch == e.epoch)
            .map(|h| h.head_revision.saturating_sub(e.revision))
    };
    let order = ordered(&s.tree);
    match conn.output {
        Output::Table => {
            let mut t = comfy_table::Table::new();
            t.load_preset(comfy_table::presets::NOTHING);
            t.set_header([
                "RELAY",
                "ROLE",
                "VERSION",
                "UPTIME",
                "RSS",
                "STREAMS",
                "ENVIRONMENT",
                "REVISION",
                "LAG",
                "DATA AGE",
                "SDKS",
            ]);
            for (n, depth) in &order {
                let name = match depth {
                    0 => n.name.clone(),
                    d => format!("{}└─ {}", "   ".repeat(d - 1), n.name),
                };
                let node = [
                    name,
                    n.role.clone(),
                    n.version.clone(),
                    human_duration(now.saturating_sub(n.started_unix_ms)),
                    format!("{:.1} MiB", n.rss_bytes as f64 / 1_048_576.0),
                    n.streams.to_string(),
                ];
                if n.environments.is_empty() {
                    t.add_row(node.iter().cloned().chain(std::iter::repeat_n("-".to_owned(), 5)));
                }
                for (i, e) in n.environments.iter().enumerate() {
                    let shown = if i == 0 { node.clone() } else { Default::default() };
                    t.add_row(shown.into_iter().chain([
                        e.name.clone(),
                        e.revision.to_string(),
                        lag(e).map_or_else(|| "other epoch".to_owned(), |l| l.to_string()),
                        human_duration(e.staleness_ms),
                        e.subscribers.to_string(),
                    ]));
                }
            }
            println!("{t}");
            if s.tree_omitted > 0 {
                println!("({} relays not listed: over the tree's bound of 1,000 entries)", s.tree_omitted);
            }
        }
        o => {
            let nodes: Vec<_> = order
                .iter()
                .map(|(n, depth)| {
                    let envs: Vec<_> = n
                        .environments
                        .iter()
                        .map(|e| serde_json::json!({"name": e.name, "epoch": e.epoch, "revision": e.revision, "lag": lag(e), "staleness_ms": e.staleness_ms, "subscribers": e.subscribers}))
                        .collect();
                    serde_json::json!({"id": n.id, "parent_id": n.parent_id, "depth": depth, "name": n.name, "role": n.role, "version": n.version, "uptime_ms": now.saturating_sub(n.started_unix_ms), "rss_bytes": n.rss_bytes, "streams": n.streams, "sampled_unix_ms": n.sampled_unix_ms, "environments": envs})
                })
                .collect();
            print_data(
                o,
                &serde_json::json!({"relay": conn.relay, "nodes": nodes, "omitted": s.tree_omitted}),
            )?;
        }
    }
    Ok(())
}

/// The nodes in tree order with their depth: each root (no parent, or a
/// parent not listed), then its children depth first.
fn ordered(nodes: &[pb::RelayNode]) -> Vec<(&pb::RelayNode, usize)> {
    let ids: std::collections::HashSet<&str> = nodes.iter().map(|n| n.id.as_str()).collect();
    let mut out = Vec::with_capacity(nodes.len());
    let mut stack: Vec<(&pb::RelayNode, usize)> = nodes
        .iter()
        .filter(|n| n.parent_id.is_empty() || !ids.contains(n.parent_id.as_str()))
        .rev()
        .map(|n| (n, 0))
        .collect();
    let mut seen = std::collections::HashSet::new();
    while let Some((n, depth)) = stack.pop() {
        // Reports may say anything: a cycle is shown once.
        if !seen.insert(n.id.as_str()) {
            continue;
        }
        out.push((n, depth));
        stack.extend(nodes.iter().filter(|c| c.parent_id == n.id).rev().map(|c| (c, depth + 1)));
        if stack.is_empty() {
            // Entries in a parent cycle (no root): listed as roots.
            stack.extend(nodes.iter().filter(|c| !seen.contains(c.id.as_str())).take(1).map(|c| (c, 0)));
        }
    }
    out
}

/// `1d2h`, `3h4m`, `5m6s`, `7s`.
fn human_duration(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{}s", s / 60, s % 60),
        3600..86400 => format!("{}h{}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86400, s % 86400 / 3600),
    }
}
