//! Short-lived processes are seen: a process that evaluates a flag for 2 s
//! and closes its client has every one of its evaluations in `GetUsage`
//! (the first summary goes out about a second after the first evaluations,
//! the rest with the Goodbye at close), so `flagctl flag stale` cannot call
//! a flag that cron jobs use "unused". Without `close()` only what the
//! quick first summaries carried arrives: nothing, for a process that
//! ends within a second.

use std::process::Command;

use flagstream_proto::v1 as pb;
use flagstream_tests::relay::Relay;

fn shortlived(relay: &Relay, flag: &str, seconds: &str, close: bool) -> u64 {
    let exe = flagstream_relay_sibling("shortlived");
    let mut cmd = Command::new(exe);
    cmd.args([
        "--endpoint",
        &relay.url(),
        "--sdk-key",
        &relay.demo_key(),
        "--flag",
        flag,
        "--seconds",
        seconds,
    ]);
    if !close {
        cmd.arg("--no-close");
    }
    let out = cmd.output().expect("the shortlived binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "shortlived failed: {stdout}{}", String::from_utf8_lossy(&out.stderr));
    if close {
        assert!(stdout.contains("closed confirmed=true"), "the relay confirmed the final summary: {stdout}");
    }
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("evaluations ")?.parse().ok())
        .unwrap_or_else(|| panic!("no evaluation count in {stdout}"))
}

/// A binary of this package, built beside the relay binary.
fn flagstream_relay_sibling(name: &str) -> std::path::PathBuf {
    let relay = flagstream_tests::relay::relay_binary();
    relay.with_file_name(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

async fn evaluated(relay: &Relay, flag: &str) -> u64 {
    let usage = relay
        .admin()
        .await
        .get_usage(pb::GetUsageRequest { environment: "demo".into(), key: flag.into(), ..Default::default() })
        .await
        .unwrap()
        .into_inner();
    let f = usage.flags.iter().find(|f| f.key == flag).expect("the flag's usage");
    // Evaluations that served a variation, and those that fell back.
    f.hour.as_ref().map_or(0, |w| {
        w.variations.iter().sum::<u64>()
            + w.fallback_missing
            + w.fallback_wrong_type
            + w.fallback_malformed
            + w.fallback_not_ready
    })
}

#[tokio::test]
async fn a_process_that_evaluates_for_two_seconds_and_closes_is_counted_whole() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;

    let n = shortlived(&relay, "new-checkout", "2", true);
    assert!(n > 10, "{n} evaluations");
    // Read before the process exited: the Goodbye is answered once the
    // summaries before it were counted.
    assert_eq!(evaluated(&relay, "new-checkout").await, n, "every evaluation of the closed process counted");

    // Without close(), a process that ends before its first summary (about
    // a second after its stream opened) leaves nothing: close() matters.
    let n = shortlived(&relay, "beta-banner", "0.3", false);
    let seen = evaluated(&relay, "beta-banner").await;
    assert!(seen < n, "without close(), {seen} of {n} evaluations arrived");
}

/// A client dropped without `close()`, while its runtime goes on, sends
/// what it counted (the drop starts the same flush, bounded at 2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_flushes_its_usage() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let client = relay.sdk().build().unwrap();
    assert!(client.wait_ready(flagstream_tests::STEP).await.has_data());
    let ctx = flagstream::Context::new("user-1");
    for _ in 0..25 {
        std::hint::black_box(client.int("max-upload-mb", &ctx, 10));
    }
    drop(client);
    flagstream_tests::cluster::eventually_async("the dropped client's evaluations counted", || async {
        evaluated(&relay, "max-upload-mb").await == 25
    })
    .await;
}
