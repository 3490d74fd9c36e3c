//! The relay tree, seen from the top: a primary, a replica of it and a
//! replica of that replica (real processes), an SDK on the last one.
//! `flagctl status --tree` on the primary lists all three in tree order,
//! each with its role, version, uptime, memory, streams, and per
//! environment the revision, lag and SDKs, fed by the reports each relay
//! sends upstream; the table draws the tree. The primary's revision-drift
//! metric says how far the slowest relay is behind: 0 while all are
//! current, 1 while the last replica is frozen (SIGSTOP) and a write goes
//! on without it, 0 again once it resumes.

use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually_async};
use flagstream_tests::relay::{Relay, bool_flag, put};

/// `flagctl status --tree -o json` on `relay`.
fn tree(relay: &Relay) -> serde_json::Value {
    serde_json::from_str(&relay.flagctl("demo", &["status", "--tree", "-o", "json"])).expect("json")
}

/// `kill -SIG pid`.
fn signal(relay: &Relay, sig: &str) {
    let ok =
        std::process::Command::new("kill").args([sig, &relay.pid().to_string()]).status().expect("kill runs");
    assert!(ok.success(), "kill {sig}");
}

#[tokio::test]
async fn status_tree_lists_every_relay_with_its_state_and_drift_shows_a_frozen_one() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &[]).await;
    let middle = &c.replicas[0];
    let mut leaf = Relay::start_replica(&dir.path().join("leaf"), &[middle.url()], &c.token, &[]).await;
    leaf.admin_secret = Some(c.primary.admin_token());
    leaf.wait_ready().await;
    let sdk = leaf.sdk_for(c.primary.demo_key()).build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());

    let mut admin = c.primary.admin().await;
    let head = put(&mut admin, "demo", bool_flag("tree-flag", true)).await.unwrap();
    leaf.wait_head("demo", head).await;

    // The leaf's report (its SDK counted) reaches the primary via the middle.
    let mut view = serde_json::Value::Null;
    eventually_async("the whole tree, current, at the primary", || {
        view = tree(&c.primary);
        let nodes = view["nodes"].as_array().map_or(&[][..], Vec::as_slice);
        let whole = nodes.len() == 3
            && nodes.iter().all(|n| {
                n["environments"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|e| e["name"] == "demo" && e["revision"].as_u64() == Some(head) && e["lag"] == 0)
            })
            && nodes[2]["environments"][0]["subscribers"] == 1;
        async move { whole }
    })
    .await;
    let nodes = view["nodes"].as_array().unwrap();
    let names: Vec<String> = nodes.iter().map(|n| n["name"].as_str().unwrap().to_owned()).collect();
    assert_eq!(names, [c.primary.grpc.to_string(), middle.grpc.to_string(), leaf.grpc.to_string()]);
    let roles: Vec<&str> = nodes.iter().map(|n| n["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["primary", "replica", "replica"]);
    assert_eq!(nodes.iter().map(|n| n["depth"].as_u64().unwrap()).collect::<Vec<_>>(), [0, 1, 2]);
    assert_eq!(nodes[1]["parent_id"], nodes[0]["id"], "the middle follows the primary");
    assert_eq!(nodes[2]["parent_id"], nodes[1]["id"], "the leaf follows the middle");
    for n in nodes {
        assert_eq!(n["version"], env!("CARGO_PKG_VERSION"), "{n}");
        assert!(n["rss_bytes"].as_u64().unwrap() > 1 << 20, "resident memory reported: {n}");
        assert!(n["uptime_ms"].as_u64().is_some(), "{n}");
        // Each relay has at least one stream: the replica below it, or the SDK.
        assert!(n["streams"].as_u64().unwrap() >= 1, "{n}");
    }
    assert_eq!(nodes[0]["environments"][0]["staleness_ms"], 0, "the primary's data is current by definition");

    let table = c.primary.flagctl("demo", &["status", "--tree"]);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains("RELAY") && lines[0].contains("LAG"), "{table}");
    assert!(lines[1].trim_start().starts_with(&c.primary.grpc.to_string()), "{table}");
    assert!(lines[2].contains(&format!("└─ {}", middle.grpc)), "{table}");
    assert!(lines[3].contains(&format!("   └─ {}", leaf.grpc)), "{table}");

    let drift = r#"flagstream_revision_drift{environment="demo"}"#;
    assert_eq!(c.primary.metric(drift).await, 0.0, "every relay current");

    // The leaf frozen: its last report (held by the middle, whose stream to
    // it stays open for the keepalive's 20 s) says the old revision.
    signal(&leaf, "-STOP");
    let next = put(&mut admin, "demo", bool_flag("tree-flag", false)).await.unwrap();
    middle.wait_head("demo", next).await;
    eventually_async("the primary's drift counts the frozen leaf", || async {
        c.primary.metric(drift).await == 1.0
    })
    .await;
    let v = tree(&c.primary);
    let frozen =
        v["nodes"].as_array().unwrap().iter().find(|n| n["name"] == leaf.grpc.to_string()).unwrap().clone();
    assert_eq!(frozen["environments"][0]["lag"], 1, "{v}");
    signal(&leaf, "-CONT");
    leaf.wait_head("demo", next).await;
    eventually_async("the drift back to 0 once the leaf caught up", || async {
        c.primary.metric(drift).await == 0.0
    })
    .await;
}
