//! Relays on one PostgreSQL database share usage: what the SDKs of each
//! relay report reaches every relay of the database (through the table
//! `flagstream_usage`), each evaluation counted once everywhere (nothing
//! passed back and forth), SDK instances added up across relays, and a
//! restarted relay takes the last hour's usage back from the database.
//! One relay runs as a role with table privileges only (no sequence, no
//! CREATE), as OPERATIONS.md §8.3 allows. Both relays announce the same
//! `advertise-url`, as OPERATIONS.md §8.2 suggests: relays are told apart
//! by their data directory's `relay-id`, not by name.

use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::cluster::eventually;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

const SHARE: &[&str] = &["--usage-share-interval", "200ms", "--advertise-url", "http://flags.example:7070"];

async fn start(dir: &std::path::Path, listen: &str, url: &str, extra: &[&str]) -> Relay {
    let mut args = vec!["--store", url];
    args.extend_from_slice(SHARE);
    args.extend_from_slice(extra);
    Relay::start_on(dir, listen, &args).await
}

fn sdk(relay: &Relay, key: &str) -> Client {
    relay.sdk_for(key).usage_interval(Duration::from_millis(200)).build().unwrap()
}

/// `flagctl flag usage KEY -o json` at `relay`: the day's evaluations (all
/// variations), fallbacks (missing) and SDKs.
fn usage(relay: &Relay, key: &str) -> (u64, u64, u64, serde_json::Value) {
    let out = relay.flagctl("demo", &["flag", "usage", key, "-o", "json"]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    let f = v["flags"][0].clone();
    let evaluations = f["day"]["evaluations"]
        .as_array()
        .map_or(0, |a| a.iter().map(|e| e["evaluations"].as_u64().unwrap_or(0)).sum());
    let missing = f["day"]["fallbacks"]["missing"].as_u64().unwrap_or(0);
    (evaluations, missing, f["sdks"].as_u64().unwrap_or(0), f)
}

/// Waits until `relay` counts `evaluations` of `key`, failing as soon as
/// it counts more; returns the SDKs it counts.
async fn wait_for(relay: &Relay, name: &str, key: &str, evaluations: u64) -> u64 {
    let what = format!("relay {name} counting {evaluations} evaluations of {key}");
    eventually(&what, || {
        let (n, _, _, f) = usage(relay, key);
        assert!(
            n <= evaluations,
            "relay {name} counts {n} evaluations of {key}, more than the {evaluations} made: {f}"
        );
        n == evaluations
    })
    .await;
    usage(relay, key).2
}

#[tokio::test]
async fn usage_reported_at_one_relay_is_seen_at_every_relay_of_the_database() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = start(&dir.path().join("a"), "127.0.0.1:0", &url, &[]).await;
    let url_b = pg.table_privileges_role("flags", "flags_app");
    let mut b = start(&dir.path().join("b"), "127.0.0.1:0", &url_b, &["--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    let head = put(&mut a.admin().await, "demo", bool_flag("kill-switch", false)).await.unwrap();
    b.wait_head("demo", head).await;
    let key = a.demo_key();

    // Ten evaluations with the wrong default at A, three of a missing flag.
    let on_a = sdk(&a, &key);
    assert!(on_a.wait_ready(STEP).await.has_data());
    for i in 0..10 {
        assert!(!on_a.bool("kill-switch", &Context::new(format!("u{i}")), true));
    }
    for _ in 0..3 {
        assert!(on_a.bool("gone-flag", &Context::new("u"), true));
    }
    assert_eq!(wait_for(&b, "b", "kill-switch", 10).await, 1, "A's SDK, counted at B");
    let id = |r: &Relay| std::fs::read_to_string(r.data_dir.join("relay-id")).expect("relay-id");
    assert_ne!(id(&a), id(&b), "each relay has its own persistent id");
    let (_, _, _, f) = usage(&b, "kill-switch");
    assert_eq!(f["default_mismatch"], true, "B warns about A's callers' default: {f}");
    eventually("the missing flag's fallbacks at B", || usage(&b, "gone-flag").1 >= 3).await;
    assert_eq!(usage(&b, "gone-flag").1, 3);

    // Five more at B: both relays count 15 and two SDKs, never more (an
    // evaluation passed back would be counted twice).
    let on_b = sdk(&b, &key);
    assert!(on_b.wait_ready(STEP).await.has_data());
    for i in 0..5 {
        assert!(!on_b.bool("kill-switch", &Context::new(format!("v{i}")), true));
    }
    assert_eq!(wait_for(&a, "a", "kill-switch", 15).await, 2);
    assert_eq!(wait_for(&b, "b", "kill-switch", 15).await, 2);
    // One more at A, seen at B: by then A has taken B's rows of every
    // earlier turn, and still counts each evaluation once.
    assert!(!on_a.bool("kill-switch", &Context::new("w"), true));
    wait_for(&b, "b", "kill-switch", 16).await;
    assert_eq!(usage(&a, "kill-switch").0, 16, "A counts each evaluation once");

    for (r, name) in [(&a, "a"), (&b, "b")] {
        assert!(!r.log().contains("usage not passed"), "relay {name}: {}", r.log());
    }

    // B restarted at the same address, its SDK still there: it takes the
    // last hour back from the database (A's rows and its own earlier
    // process's), counts its SDK once (not again from its own old rows)
    // and puts none of that backlog into its metrics.
    let listen = b.grpc.to_string();
    b.sigterm();
    b.wait(STEP).await;
    let mut b = start(&dir.path().join("b"), &listen, &url_b, &["--demo", "false"]).await;
    b.admin_secret = Some(a.admin_token());
    assert!(!on_b.bool("kill-switch", &Context::new("after"), true));
    assert_eq!(wait_for(&b, "b (restarted)", "kill-switch", 17).await, 2, "A's SDK and B's, each once");
    assert_eq!(wait_for(&a, "a", "kill-switch", 17).await, 2);
    assert_eq!(usage(&b, "gone-flag").1, 3, "the backlog is in the view");
    // The series appears on its first count: absent means none counted.
    assert_eq!(
        b.metric_or_zero("flagstream_usage_fallbacks_total{environment=\"demo\",cause=\"missing\"}").await,
        0.0,
        "the backlog is not in the restarted relay's metrics"
    );
    assert!(!b.log().contains("usage not passed"), "{}", b.log());
}
