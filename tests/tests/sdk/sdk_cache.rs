//! The last-known-good cache: a restart with every relay down serves the
//! cached flags within milliseconds (marked stale); a corrupt cache is
//! reported and ignored.

use std::time::{Duration, Instant};

use flagstream::{Client, Context, Source, Status};
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;

/// Waits until the client has written its cache once (the count is
/// bumped after the flush).
async fn wait_for_cache_write(c: &Client) {
    flagstream_tests::cluster::eventually("the cache write", || c.stats().cache_writes >= 1).await;
}

/// A client of `url` with its cache in `cache`, once it is ready and has
/// written the cache.
async fn cached_client(url: &str, key: &str, cache: &std::path::Path) -> Client {
    let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(cache).build().unwrap();
    c.wait_ready(STEP).await;
    wait_for_cache_write(&c).await;
    c
}

/// Waits until `flag` is served as true.
async fn until_on(c: &Client, flag: &str, ctx: &Context<'_>) {
    let deadline = Instant::now() + STEP;
    while !c.bool(flag, ctx, false) {
        assert!(Instant::now() < deadline, "{flag} never turned on: {:?}", c.stats());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Cached flags serve at once with every relay down, marked stale.
#[tokio::test]
async fn ready_from_cache_with_relays_down() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut relay = Relay::start(dir.path(), &[]).await;
    let (url, key) = (relay.url(), relay.demo_key());
    drop(cached_client(&url, &key, &cache).await); // a first client fills the cache
    relay.kill9();
    relay.wait(STEP).await;
    // The dropped client released the directory: no wait needed (see
    // `a_client_rebuilt_at_once_gets_the_cache`).
    let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(&cache).build().unwrap();
    assert_eq!(c.stats().cache_errors, 0);
    let ctx = Context::new("user-9").with("country", "US").with("plan", "enterprise");
    assert!(c.bool("new-checkout", &ctx, false), "cached flag not served");
    match c.status() {
        Status::Stale { source: Source::Cache, revision: 1, .. } => {}
        other => panic!("expected stale cache data, got {other:?}"),
    }
    assert!(c.bool_detail("new-checkout", &ctx, false).stale);
}

/// Garbage in the cache is detected, counted and ignored.
#[tokio::test]
async fn corrupt_cache_is_ignored_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    {
        let db = sled::open(&cache).unwrap();
        db.insert("snapshot", b"\x0a\xff\xff\xff not a snapshot".to_vec()).unwrap();
        db.flush().unwrap();
    }
    let c =
        Client::builder().endpoints(["http://127.0.0.1:9"]).sdk_key("k").cache_dir(&cache).build().unwrap();
    assert_eq!(c.stats().cache_errors, 1);
    assert!(!c.status().has_data());
    assert!(c.bool("anything", &Context::new("u"), true), "default served");
}

/// A cache written for one SDK key is never served to another.
#[tokio::test]
async fn cache_of_another_key_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut relay = Relay::start(dir.path(), &[]).await;
    drop(cached_client(&relay.url(), &relay.demo_key(), &cache).await); // a first client fills the cache
    relay.kill9();
    relay.wait(STEP).await;
    let c = relay.sdk_for("fs_sdk_someone_else").cache_dir(&cache).build().unwrap();
    assert!(!c.status().has_data(), "another key's cache was served: {:?}", c.status());
    assert_eq!(c.stats().cache_errors, 1);
}

/// A client started from its cache while the relay is up resumes with a
/// delta on top of the cached flags (no snapshot), and serves the change.
#[tokio::test]
async fn cached_client_resumes_with_a_delta() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let relay = Relay::start(dir.path(), &[]).await;
    let (url, key) = (relay.url(), relay.demo_key());
    let ctx = Context::new("user-1");
    drop(cached_client(&url, &key, &cache).await); // a first client fills the cache
    let mut admin = relay.admin().await;
    flagstream_tests::relay::put(&mut admin, "demo", flagstream_tests::relay::bool_flag("added-later", true))
        .await
        .unwrap();

    let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(&cache).build().unwrap();
    assert!(c.status().has_data(), "cache served at build: {:?}", c.status());
    assert!(!c.bool("added-later", &ctx, false), "not in the cache yet");
    until_on(&c, "added-later", &ctx).await;
    let stats = c.stats();
    assert_eq!((stats.snapshots_applied, stats.deltas_applied, stats.resyncs), (0, 1, 0), "{stats:?}");
    assert!(c.bool(
        "new-checkout",
        &Context::new("user-9").with("country", "US").with("plan", "enterprise"),
        false
    ));
}

/// A revision applied but not yet written by the debounced writer still
/// reaches the cache: dropping the last clone writes it, so a restart
/// serves it. (The debounce is an hour here, so the writer cannot have
/// written it first.)
#[tokio::test]
async fn dropping_the_client_writes_the_newest_revision() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut relay = Relay::start(dir.path(), &[]).await;
    let (url, key) = (relay.url(), relay.demo_key());
    let ctx = Context::new("user-1");
    {
        let c = Client::builder()
            .endpoints([url.clone()])
            .sdk_key(key.clone())
            .cache_dir(&cache)
            .cache_write_interval(Duration::from_secs(3600))
            .build()
            .unwrap();
        c.wait_ready(STEP).await;
        let mut admin = relay.admin().await;
        flagstream_tests::relay::put(
            &mut admin,
            "demo",
            flagstream_tests::relay::bool_flag("last-word", true),
        )
        .await
        .unwrap();
        until_on(&c, "last-word", &ctx).await;
        assert_eq!(c.stats().cache_writes, 0, "the debounced writer wrote within its hour");
    } // dropped here: the final write
    relay.kill9();
    relay.wait(STEP).await;
    let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(&cache).build().unwrap();
    assert!(
        c.bool("last-word", &ctx, false),
        "the newest revision did not reach the cache: {:?}",
        c.status()
    );
}

/// Garbled or truncated cache files (sled's own) never make a client
/// panic or serve a torn snapshot: it either reports the cache unusable
/// (counted) or finds no snapshot, and then gets its data from the relay.
#[tokio::test]
async fn garbled_or_truncated_cache_files_fall_back_to_the_relay() {
    for damage in ["garble", "truncate"] {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let relay = Relay::start(dir.path(), &[]).await;
        let (url, key) = (relay.url(), relay.demo_key());
        drop(cached_client(&url, &key, &cache).await);
        let mut damaged = 0;
        for e in std::fs::read_dir(&cache).unwrap() {
            let p = e.unwrap().path();
            let len = std::fs::metadata(&p).unwrap().len() as usize;
            if !p.is_file() || len < 64 {
                continue;
            }
            let mut bytes = std::fs::read(&p).unwrap();
            if damage == "garble" {
                for b in &mut bytes[len / 4..] {
                    *b ^= 0xa5;
                }
            } else {
                bytes.truncate(len / 3);
            }
            std::fs::write(&p, bytes).unwrap();
            damaged += 1;
        }
        assert!(damaged > 0, "no cache file to {damage}");
        let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(&cache).build().unwrap();
        let served_from_cache = c.status().has_data();
        if served_from_cache {
            // Only a snapshot that decoded and verified its checksum.
            assert!(matches!(c.status(), Status::Stale { source: Source::Cache, .. }), "{:?}", c.status());
        }
        c.wait_ready(STEP).await;
        assert!(c.bool(
            "new-checkout",
            &Context::new("user-9").with("country", "US").with("plan", "enterprise"),
            false
        ));
        eprintln!("{damage}: served from cache {served_from_cache}, {:?}", c.stats());
    }
}

/// Dropping a client releases its cache directory at once: a client built
/// right after it on the same directory reads the cache (no "in use"
/// warning, no error counted).
#[tokio::test]
async fn a_client_rebuilt_at_once_gets_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let mut relay = Relay::start(dir.path(), &[]).await;
    let (url, key) = (relay.url(), relay.demo_key());
    let c = cached_client(&url, &key, &cache).await;
    relay.kill9();
    relay.wait(STEP).await;
    drop(c);
    let again = Client::builder().endpoints([url]).sdk_key(key).cache_dir(&cache).build().unwrap();
    assert_eq!(again.stats().cache_errors, 0, "the cache was still locked");
    assert!(matches!(again.status(), Status::Stale { source: Source::Cache, .. }), "{:?}", again.status());
}
