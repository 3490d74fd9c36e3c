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
