//! The usage table stays bounded under flag churn, and a deleted
//! environment takes its usage with it. A write token replaces 5,000
//! flags with 5,000 new ones on every write while an SDK key reports
//! usage for every flag it was served: a deleted flag's key joins the
//! environment's bounded share of keys that are no flag at once (1,024),
//! so `usage_keys` stays within 5,000 + 1,024, and the relay's resident
//! memory stays within a bound of the same churn without usage reports
//! (a relay run in the same test: the write path's own memory is not the
//! usage table's). Deleting the environment removes its usage and
//! its usage series: a new environment of the same name starts empty.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag};
use flagstream_tests::subscriber::{Subscriber, Update};

const FLAGS: usize = 5_000;
const ROUNDS: usize = 8;
/// Keys that are no flag an environment keeps (relay `usage::MAX_ABSENT_KEYS`).
const ABSENT_SHARE: usize = 1_024;

fn churn(round: usize) -> pb::BatchRequest {
    let put = |i: usize| pb::BatchOp {
        op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
            flag: Some(bool_flag(&format!("r{round}-{i}"), true)),
            expected_version: None,
        })),
    };
    let delete = |i: usize| pb::BatchOp {
        op: Some(pb::batch_op::Op::DeleteFlag(pb::DeleteFlagOp {
            key: format!("r{}-{i}", round - 1),
            expected_version: None,
        })),
    };
    let mut ops: Vec<pb::BatchOp> = (0..FLAGS).map(put).collect();
    if round > 0 {
        ops.extend((0..FLAGS).map(delete));
    }
    pb::BatchRequest { environment: "churn".into(), ops, expected_revision: None, comment: String::new() }
}

/// A usage summary for the round's flags (1,000 per summary).
fn report(round: usize) -> Vec<pb::SubscribeRequest> {
    (0..FLAGS)
        .step_by(1_000)
        .map(|start| {
            let flags = (start..start + 1_000)
                .map(|i| pb::FlagUsage {
                    key: format!("r{round}-{i}"),
                    variations: vec![1],
                    defaults: vec!["false".into()],
                    ..Default::default()
                })
                .collect();
            pb::SubscribeRequest {
                kind: Some(pb::subscribe_request::Kind::Usage(pb::UsageSummary {
                    flags,
                    ..Default::default()
                })),
            }
        })
        .collect()
}

/// The churn on a fresh relay, with or without usage reports; the relay
/// (still running) and its RSS after each round, KiB.
async fn run(dir: &std::path::Path, reports: bool) -> (Relay, Vec<u64>) {
    let relay = Relay::start(dir, &["--heartbeat", "300ms"]).await;
    let key = relay.create_env("churn").await;
    let mut admin = relay.admin().await;
    let mut sdk = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sdk.next_change(STEP).await.unwrap();
    let mut rss = Vec::new();
    let mut accepted = 0.0;
    for round in 0..ROUNDS {
        admin.batch(churn(round)).await.expect("the churning write");
        sdk.wait_revision(round as u64 + 1, STEP).await.unwrap();
        if reports {
            for summary in report(round) {
                sdk.send(summary).await.unwrap();
            }
            accepted += (FLAGS / 1_000) as f64;
            flagstream_tests::cluster::eventually_async("the round's summaries read", || async {
                relay.metric("flagstream_usage_summaries_total{result=\"accepted\",field=\"\"}").await
                    >= accepted
            })
            .await;
            let keys = relay.metric("flagstream_usage_keys").await as usize;
            let bound = FLAGS + ABSENT_SHARE;
            assert!(keys <= bound, "round {round}: {keys} usage keys, bound {bound}");
        }
        rss.push(relay.rss_kib().0);
    }
    (relay, rss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_stays_bounded_under_churn_and_goes_with_its_environment() {
    let baseline_dir = tempfile::tempdir().unwrap();
    let (baseline, without) = run(baseline_dir.path(), false).await;
    drop(baseline);
    let dir = tempfile::tempdir().unwrap();
    let (relay, rss) = run(dir.path(), true).await;
    let mut admin = relay.admin().await;
    let mut other = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    other.next_change(STEP).await.unwrap();
    eprintln!("relay RSS after each churn round, KiB: with usage reports {rss:?}, without {without:?}");
    let usage = admin
        .get_usage(pb::GetUsageRequest { environment: "churn".into(), page_size: 1, ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(usage.dropped_keys, 0, "nothing was dropped: deleted flags' keys were evicted, not refused");
    // The usage table's memory is bounded: ~6,000 keys' windows (~3 KiB
    // each; 64 MiB with the allocator's noise), over the same churn without reports (a
    // leak of the churned keys' usage would add ~5,000 keys' windows, ~15
    // MiB, a round).
    // The highest of each run, not the last: the allocator hands memory
    // back at moments of its own (a run without reports measured 235 MiB
    // in one round and 213 MiB two rounds later), while a leak grows to
    // the end.
    let (with, base) = (*rss.iter().max().unwrap(), *without.iter().max().unwrap());
    assert!(with <= base + 64 * 1024, "peak RSS {with} KiB with usage reports, {base} KiB without");

    // A default passed for a deleted environment's flags is not shown to
    // a new environment of the same name, and its series are gone.
    assert!(relay.metric_or_zero("flagstream_usage_keys").await > 0.0);
    admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "churn".into(), expected_revision: None })
        .await
        .unwrap();
    assert_eq!(relay.metric("flagstream_usage_keys").await, 0.0, "the environment's usage went with it");
    relay.create_env("churn").await;
    let fresh = admin
        .get_usage(pb::GetUsageRequest { environment: "churn".into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    assert!(fresh.flags.is_empty(), "a new environment of the name starts empty: {:?}", fresh.flags.first());
    let text = relay.metrics_text().await;
    assert!(!text.contains("environment=\"churn\""), "the deleted environment's usage series are gone");
    let mut heartbeats = 0;
    while heartbeats < 2 {
        if let Update::Heartbeat { .. } = other.next(STEP).await.unwrap() {
            heartbeats += 1;
        }
    }
}
