//! Owner-only files: a relay's data directory and its sled store are mode
//! 0700, every file in them 0600 (the store's files, the commit marks, the
//! admin token, the demo key), also after a clean stop; an SDK's cache
//! directory is 0700 with its files 0600. Other users of the host read
//! neither flags, audit records, token hashes nor secrets.
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())).permissions().mode() & 0o777
}

/// Every directory under `dir` (itself included) is 0700 and every file
/// 0600; returns how many files there are.
fn all_private(dir: &Path) -> usize {
    assert_eq!(mode(dir), 0o700, "{} is {:04o}", dir.display(), mode(dir));
    let mut files = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files += all_private(&p);
        } else {
            assert_eq!(mode(&p), 0o600, "{} is {:04o}", p.display(), mode(&p));
            files += 1;
        }
    }
    files
}

#[tokio::test]
async fn the_relay_and_the_sdk_keep_their_files_private() {
    let dir = tempfile::tempdir().unwrap();
    let mut relay = Relay::start(dir.path(), &[]).await;
    put(&mut relay.admin().await, "demo", bool_flag("private", true)).await.expect("a write");
    let data = relay.data_dir.clone();
    assert_eq!(mode(&data), 0o700, "the data directory");
    for file in ["commit-marks.json", "admin-token", "demo-sdk-key"] {
        assert_eq!(mode(&data.join(file)), 0o600, "{file}");
    }
    assert!(all_private(&data.join("db")) >= 2, "sled's files are there");

    // The SDK's cache, in directories that do not exist yet.
    let cache = dir.path().join("caches").join("sdk");
    let client = relay.sdk().cache_dir(&cache).build().unwrap();
    client.wait_ready(STEP).await;
    flagstream_tests::cluster::eventually("the cache write", || client.stats().cache_writes >= 1).await;
    drop(client);
    assert_eq!(mode(&dir.path().join("caches")), 0o700, "a parent the SDK created");
    assert!(all_private(&cache) >= 1, "the cache's files are there");

    // After a clean stop: whatever sled wrote meanwhile is private too.
    relay.sigterm();
    assert!(relay.wait(Duration::from_secs(30)).await.success());
    all_private(&data.join("db"));
    assert_eq!(mode(&data.join("commit-marks.json")), 0o600);
}
