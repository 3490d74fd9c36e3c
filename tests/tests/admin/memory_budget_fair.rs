//! The memory budget is a limit, not a second outage. One write token
//! grows its environment in batches until `memory-budget` refuses it (a
//! 10,000-flag batch at once, from its request alone; 1,000-flag batches
//! once the relay nears the budget): the relay's resident memory, sampled every 2 ms from
//! outside, never passes the budget by more than [`MARGIN`] (a write is
//! checked against an estimate from its request before it is planned, and
//! again once planned). Then another environment, far under its fair share,
//! keeps writing: every one-flag toggle and every new flag passes, while
//! the grown environment stays refused. Its SDK stream keeps its
//! heartbeats throughout.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag};
use flagstream_tests::subscriber::{Subscriber, Update};
use tonic::Code;

const BUDGET: u64 = 192 << 20;
/// What sampled RSS may pass the budget by: the admin request being
/// decoded (at most 8 MiB, ~3× that as models) before any check can see
/// it, and allocator slack.
const MARGIN: u64 = 32 << 20;

fn batch(env: &str, start: usize, n: usize) -> pb::BatchRequest {
    let ops = (start..start + n)
        .map(|i| {
            let mut f = bool_flag(&format!("grow-{i}"), true);
            f.description = "d".repeat(200);
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(f), expected_version: None })),
            }
        })
        .collect();
    pb::BatchRequest { environment: env.into(), ops, expected_revision: None, comment: String::new() }
}

fn rss_of(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("the relay's /proc status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:")?.split_whitespace().next()?.parse().ok())
        .expect("VmRSS");
    kib * 1024
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_growth_stops_at_the_budget_and_not_at_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let budget = BUDGET.to_string();
    let relay = Relay::start(
        dir.path(),
        &[
            "--heartbeat",
            "500ms",
            "--memory-budget",
            &budget,
            "--quota-flags",
            "2000000",
            "--quota-snapshot-bytes",
            "1073741824",
        ],
    )
    .await;
    relay.create_env("hog").await;
    let small_key = relay.create_env("small").await;
    let mut admin = relay.admin().await;
    for i in 0..20 {
        flagstream_tests::relay::put(&mut admin, "small", bool_flag(&format!("f-{i}"), true)).await.unwrap();
    }
    let mut small = Subscriber::connect(relay.channel().await, &small_key, None).await.unwrap();
    small.next_change(STEP).await.unwrap();

    // RSS sampled every 2 ms on a thread of its own.
    let (peak, stop) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    let sampler = {
        let (peak, stop, pid) = (peak.clone(), stop.clone(), relay.pid());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_of(pid), Ordering::Relaxed);
                // The sampling period (what the budget is measured against),
                // on a thread of its own: not a wait for an event.
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        })
    };

    // A 10,000-flag batch (2.4 MB) costs more than this relay can hold
    // while it is applied: refused from its request, before planning.
    let too_big = admin.batch(batch("hog", 0, 10_000)).await.expect_err("a batch this relay cannot hold");
    assert_eq!(too_big.code(), Code::ResourceExhausted, "{too_big:?}");
    assert!(too_big.message().contains("estimated from the request"), "{}", too_big.message());
    // In 1,000-flag batches the hog grows until the budget stops it.
    let mut accepted = 0;
    let refusal = loop {
        assert!(accepted < 2_000, "{accepted} batches accepted within a {BUDGET} byte budget");
        match admin.batch(batch("hog", accepted * 1_000, 1_000)).await {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
    };
    assert_eq!(refusal.code(), Code::ResourceExhausted, "{refusal:?}");
    assert!(refusal.message().contains("memory-budget"), "{}", refusal.message());
    eprintln!("hog: {accepted} batches of 1,000 flags accepted; refused: {}", refusal.message());

    assert!(
        refusal.message().contains("fair share"),
        "the grown environment is over its share: {}",
        refusal.message()
    );

    // The small environment's toggles and new flags all pass, while the
    // hog keeps trying (memory freed meanwhile may let one of its batches
    // through: the budget reads resident memory).
    let mut small_refused = Vec::new();
    let mut hog_refused = 0;
    for i in 0..48 {
        let write = if i % 2 == 0 {
            flagstream_tests::relay::put(&mut admin, "small", bool_flag(&format!("f-{}", i % 20), i % 4 == 0))
                .await
        } else {
            flagstream_tests::relay::put(&mut admin, "small", bool_flag(&format!("new-{i}"), true)).await
        };
        if let Err(e) = write {
            small_refused.push(format!("write {i}: {} {}", e.code(), e.message()));
        }
        if i % 4 == 0 {
            accepted += 1;
            match admin.batch(batch("hog", accepted * 1_000, 1_000)).await {
                Ok(_) => {}
                Err(e) if e.code() == Code::ResourceExhausted => hog_refused += 1,
                Err(e) => panic!("the hog's batch failed otherwise: {e:?}"),
            }
        }
    }
    assert!(hog_refused > 0, "the hog stays held off");
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    eprintln!("sampled RSS peak {} MiB, budget {} MiB", peak >> 20, BUDGET >> 20);
    assert!(small_refused.is_empty(), "the small environment was refused:\n{}", small_refused.join("\n"));
    assert!(
        peak <= BUDGET + MARGIN,
        "sampled RSS reached {} MiB, budget {} MiB + margin {} MiB",
        peak >> 20,
        BUDGET >> 20,
        MARGIN >> 20
    );
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"memory_budget\"}").await >= 2.0);

    // The small environment's stream kept up.
    let mut heartbeats = 0;
    while heartbeats < 2 {
        if let Update::Heartbeat { .. } = small.next(STEP).await.unwrap() {
            heartbeats += 1;
        }
    }
}
