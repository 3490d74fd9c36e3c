//! Usage reads cannot stall anyone and fit any environment: `GetUsage`
//! pages (at most 1,000 flags and 4 MiB each, the last key as the next
//! page's token), so `flagctl flag usage` and `flag stale` work on an
//! environment of 3,000 flags with three 1 KB JSON variations each (9 MB
//! of usage views, over the 8 MiB response limit in one piece); a token
//! reading usage in a loop is held to its read rate
//! (`quota-usage-reads-per-sec`, RESOURCE_EXHAUSTED with a retry hint,
//! counted), and another environment's stream keeps its heartbeats while
//! the largest environment's usage is read.

use std::time::{Duration, Instant};

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};

const FLAGS: usize = 3_000;

fn json_flag(i: usize) -> pb::Flag {
    let value = |v: usize| serde_json::json!({ "variant": v, "payload": "p".repeat(1_000) });
    let flag = flagstream::Flag {
        key: format!("big-{i:05}"),
        flag_type: flagstream::FlagType::Json,
        variations: vec![value(0), value(1), value(2)],
        on: true,
        off_variation: 0,
        targets: vec![],
        rules: vec![],
        fallthrough: flagstream::model::Serve::variation(1),
        prerequisites: vec![],
        salt: String::new(),
        version: 0,
        revision: 0,
        description: String::new(),
        tags: vec![],
        owner: String::new(),
        client_visible: false,
    };
    flagstream::wire::flag_to_proto(&flag)
}

fn usage(keys: std::ops::Range<usize>) -> pb::SubscribeRequest {
    let flags = keys
        .map(|i| pb::FlagUsage {
            key: format!("big-{i:05}"),
            variations: vec![0, 3],
            defaults: vec!["{}".into()],
            ..Default::default()
        })
        .collect();
    pb::SubscribeRequest {
        kind: Some(pb::subscribe_request::Kind::Usage(pb::UsageSummary { flags, ..Default::default() })),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_of_a_large_environment_is_read_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        dir.path(),
        &["--heartbeat", "300ms", "--quota-snapshot-bytes", "268435456", "--quota-usage-reads-per-sec", "5"],
    )
    .await;
    let key = relay.create_env("big").await;
    let mut admin = relay.admin().await;
    for start in (0..FLAGS).step_by(500) {
        let ops = (start..start + 500)
            .map(|i| pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                    flag: Some(json_flag(i)),
                    expected_version: None,
                })),
            })
            .collect();
        let req = pb::BatchRequest {
            environment: "big".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        };
        admin.batch(req).await.expect("batch accepted");
    }
    let mut sdk = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sdk.next_change(STEP).await.unwrap();
    for start in (0..FLAGS).step_by(1_000) {
        sdk.send(usage(start..start + 1_000)).await.unwrap();
    }
    flagstream_tests::cluster::eventually_async("the summaries read", || async {
        relay.metric("flagstream_usage_summaries_total{result=\"accepted\",field=\"\"}").await >= 3.0
    })
    .await;
    let mut other = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    other.next_change(STEP).await.unwrap();

    // Page by page: every flag once, each page within its bounds.
    let mut token = String::new();
    let mut seen = Vec::new();
    let mut pages = 0;
    let mut slowest = Duration::ZERO;
    let mut deltas = Vec::new();
    loop {
        // Another environment's delta, written while this page is read,
        // timed from the write to its delivery.
        let mut writer = relay.admin().await;
        let toggle = tokio::spawn(async move {
            let started = Instant::now();
            let r = flagstream_tests::relay::put(
                &mut writer,
                "demo",
                flagstream_tests::relay::bool_flag("toggled", true),
            )
            .await;
            (started, r.expect("the other environment's write"))
        });
        let started = Instant::now();
        let page = loop {
            let req = pb::GetUsageRequest {
                environment: "big".into(),
                page_token: token.clone(),
                ..Default::default()
            };
            match admin.get_usage(req).await {
                Ok(r) => break r.into_inner(),
                // The read rate: wait for the hint.
                Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                    let ms: u64 = s
                        .metadata()
                        .get("flagstream-retry-after-ms")
                        .unwrap()
                        .to_str()
                        .unwrap()
                        .parse()
                        .unwrap();
                    // The relay's own retry hint, waited as a client must
                    // (its token bucket refills on the real clock).
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                Err(s) => panic!("GetUsage failed: {s:?}"),
            }
        };
        slowest = slowest.max(started.elapsed());
        let (written, revision) = toggle.await.unwrap();
        other.wait_revision(revision, STEP).await.unwrap();
        deltas.push(written.elapsed());
        pages += 1;
        assert!(page.flags.len() <= 1_000);
        assert!(prost::Message::encoded_len(&page) <= (4 << 20) + 4096, "a page is at most 4 MiB");
        seen.extend(page.flags.iter().map(|f| f.key.clone()));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    eprintln!(
        "GetUsage of {FLAGS} flags: {pages} pages, slowest {slowest:?}; the other environment's deltas meanwhile, write to delivery: {deltas:?}"
    );
    assert!(pages >= 3, "{pages} pages");
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, seen, "in key order, each key once");
    assert_eq!(seen.len(), FLAGS);

    // flagctl pages through too.
    let out = relay.flagctl("big", &["flag", "usage", "-o", "json"]);
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(listed["flags"].as_array().map(Vec::len), Some(FLAGS), "flagctl flag usage lists every flag");
    let stale = relay.flagctl("big", &["flag", "stale", "-o", "json"]);
    assert!(serde_json::from_str::<serde_json::Value>(&stale).is_ok(), "{stale}");

    // A token reading usage in a loop is held to its rate, counted.
    let mut refused = 0;
    for _ in 0..30 {
        let req =
            pb::GetUsageRequest { environment: "big".into(), key: "big-00001".into(), ..Default::default() };
        if let Err(s) = admin.get_usage(req).await {
            assert_eq!(s.code(), tonic::Code::ResourceExhausted, "{s:?}");
            assert!(s.message().contains("quota-usage-reads-per-sec"), "{}", s.message());
            refused += 1;
        }
    }
    assert!(refused > 0, "the read rate holds");
    assert!(
        relay.metric("flagstream_quota_refusals_total{env=\"big\",quota=\"usage_reads_per_sec\"}").await
            >= refused as f64
    );
    let mut heartbeats = 0;
    while heartbeats < 3 {
        if let Update::Heartbeat { .. } = other.next(STEP).await.unwrap() {
            heartbeats += 1;
        }
    }
}
