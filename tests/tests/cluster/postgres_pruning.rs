//! The shared history is pruned to the retention (`changelog-revisions`),
//! by one relay at a time, keeping the newest revisions; an SDK whose
//! cursor fell out of it resynchronises with one snapshot.

use flagstream::{Client, Context};
use flagstream_tests::STEP;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Relay, bool_flag, put};

#[tokio::test]
async fn the_history_is_pruned_to_the_retention() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let keep = ["--changelog-revisions", "5"];
    let a = Relay::start(&dir.path().join("a"), &["--store", &url, keep[0], keep[1]]).await;
    let key = a.demo_key();
    // An SDK that stops at the demo's first revisions, then comes back.
    let cache = dir.path().join("sdk-cache");
    let sdk = |endpoint: String| {
        Client::builder()
            .endpoints(vec![endpoint])
            .sdk_key(&key)
            .cache_dir(&cache)
            .build()
            .expect("client config")
    };
    let early = sdk(a.url());
    early.wait_ready(STEP).await;
    drop(early);
    let mut admin = a.admin().await;
    let mut head = 0;
    for i in 0..20 {
        head = put(&mut admin, "demo", bool_flag(&format!("p{i}"), true)).await.unwrap();
    }
    let count = |sql: &str| pg.sql("flags", sql).trim().parse::<u64>().expect("a number");
    assert!(count("SELECT count(*) FROM flagstream_history WHERE env = 'demo'") > 5, "nothing to prune yet");
    // A relay's feed prunes when it starts (then every minute), under an
    // advisory lock so only one relay prunes at a time.
    let b =
        Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false", keep[0], keep[1]]).await;
    flagstream_tests::cluster::eventually("the history pruned to 5 revisions", || {
        count("SELECT count(*) FROM flagstream_history WHERE env = 'demo'") <= 5
    })
    .await;
    assert_eq!(
        count("SELECT max(revision) FROM flagstream_history WHERE env = 'demo'"),
        head,
        "the newest revision is kept"
    );
    assert!(b.log().contains("pruned the database's history"), "{}", b.log());
    // The SDK's cached cursor is older than the history: one snapshot
    // brings it to the head, with every write.
    let late = sdk(b.url());
    flagstream_tests::cluster::eventually("the returning SDK at the head", || {
        late.bool("p19", &Context::new("u"), false)
    })
    .await;
    let s = late.stats();
    assert_eq!(s.snapshots_applied, 1, "{s:?}");
    assert!((0..20).all(|i| late.bool(&format!("p{i}"), &Context::new("u"), false)));
}
