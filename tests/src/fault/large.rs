//! Scenario 5, large flag sets: an environment of many flags (50,000 of
//! ~1 KiB at full size, a ~50 MiB snapshot) is sent in chunks within the
//! message limits, an SDK syncs it from the relay and cold-starts from its
//! cache with every relay down, and the memory peaks are reported. The two
//! SDK clients run in processes of their own (`resilience sdk-peak`), so
//! each peak is the SDK's alone.

use std::path::Path;
use std::time::{Duration, Instant};

use flagstream::Client;

use crate::relay::Relay;
use crate::subscriber::{Subscriber, Update};

/// What one run measured.
#[derive(Debug, Clone)]
pub struct LargeReport {
    /// Flags in the environment.
    pub flags: usize,
    /// Bytes of stored flag encodings (`flagstream_store_bytes`).
    pub snapshot_bytes: u64,
    /// Chunks the snapshot came in.
    pub chunks: u32,
    /// Relay peak resident memory, KiB.
    pub relay_peak_rss_kib: u64,
    /// The relay's peak resident memory, KiB, restarted on its data
    /// directory: loading the environment from its store (sled), then
    /// sending one subscriber the whole snapshot.
    pub relay_restart_peak_rss_kib: u64,
    /// A replica's peak resident memory, KiB: started empty beside the
    /// primary, taking the environment whole from it and storing it.
    pub replica_peak_rss_kib: u64,
    /// The SDK's first sync from the relay, then its cold start from the
    /// cache with the relay down, each in a process of its own.
    pub sdk: [SdkPeak; 2],
}

/// One SDK client's run in a process of its own.
#[derive(Debug, Clone, Copy)]
pub struct SdkPeak {
    /// Build → ready (first sync), or build → serving from the cache
    /// (cold; its peak is taken after every flag was compiled).
    pub elapsed: Duration,
    /// Flags it held.
    pub flags: usize,
    /// The process's resident memory before the client was built, KiB.
    pub start_kib: u64,
    /// The process's resident memory while the client serves, KiB: synced
    /// and its cache written (first sync), or every flag compiled (cold).
    pub held_kib: u64,
    /// The process's peak resident memory, KiB (`VmHWM` after the client
    /// was dropped, its cache written included).
    pub peak_kib: u64,
}

/// The child's side of [`run`]'s SDK runs (`<bin> sdk-peak`): builds a
/// client against `url` with `cache` (`cold`: the relay is down, it serves from the cache and
/// compiles every flag), drops it, and prints its [`SdkPeak`] as one line.
pub async fn sdk_peak(url: &str, key: &str, cache: &Path, cold: bool, guard: Duration) {
    let start_kib = self_peak_rss_kib();
    let started = Instant::now();
    let c = Client::builder().endpoints([url]).sdk_key(key).cache_dir(cache).build().expect("builds");
    let elapsed = if cold {
        // Serving from here; the peak counts every flag compiled too.
        let serving = started.elapsed();
        c.snapshot().warm_up();
        serving
    } else {
        c.wait_ready(guard).await;
        let ready = started.elapsed();
        crate::cluster::eventually("the SDK wrote its cache", || c.stats().cache_writes >= 1).await;
        ready
    };
    let held_kib = self_rss_kib();
    let flags = c.snapshot().len();
    drop(c); // writes the cache
    println!(
        "elapsed_us={} flags={flags} start_kib={start_kib} held_kib={held_kib} peak_kib={}",
        elapsed.as_micros(),
        self_peak_rss_kib()
    );
}

async fn sdk_child(bin: &SdkBin<'_>, url: &str, key: &str, cache: &Path, cold: bool) -> SdkPeak {
    let mut words = bin.wrap.split_whitespace();
    let mut cmd = match words.next() {
        Some(wrapper) => {
            let mut c = tokio::process::Command::new(wrapper);
            c.args(words).arg(bin.path);
            c
        }
        None => tokio::process::Command::new(bin.path),
    };
    cmd.arg("sdk-peak").arg("--url").arg(url).arg("--cache").arg(cache).env("FLAGSTREAM_SDK_KEY", key);
    if cold {
        cmd.arg("--cold");
    }
    let out = cmd.output().await.expect("the sdk-peak child runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sdk-peak failed: {}", String::from_utf8_lossy(&out.stderr));
    let field = |name: &str| -> u64 {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or_else(|| panic!("sdk-peak printed no {name}: {text}"))
    };
    SdkPeak {
        elapsed: Duration::from_micros(field("elapsed_us")),
        flags: field("flags") as usize,
        start_kib: field("start_kib"),
        held_kib: field("held_kib"),
        peak_kib: field("peak_kib"),
    }
}

/// The program the SDK runs are started from.
pub struct SdkBin<'a> {
    /// A binary with the `sdk-peak` command (`resilience`).
    pub path: &'a Path,
    /// A command the SDK runs under, its words split at white space (e.g.
    /// `heaptrack -o /tmp/sdk` for a heap profile); empty: none.
    pub wrap: &'a str,
}

/// Runs the scenario with `flags` flags of `description_bytes` each.
pub async fn run(
    dir: &Path,
    flags: usize,
    description_bytes: usize,
    sdk_bin: &SdkBin<'_>,
    guard: Duration,
) -> LargeReport {
    let quota = (flags + 100).to_string();
    let mut relay = Relay::start(&dir.join("relay"), &["--quota-flags", &quota]).await;
    let key = relay.create_filled_env("big", flags, description_bytes).await;
    let snapshot_bytes = relay.metric("flagstream_store_bytes{env=\"big\"}").await as u64;

    let mut raw = Subscriber::connect(relay.channel().await, &key, None).await.expect("subscribe");
    let chunks = match raw.next_change(guard).await.expect("the snapshot arrives whole and checksummed") {
        Update::Snapshot { chunks, .. } => chunks,
        other => panic!("expected a snapshot, got {other:?}"),
    };
    assert_eq!(raw.flags.len(), flags, "every flag arrived");
    drop(raw);

    let cache = dir.join("sdk-cache");
    let first = sdk_child(sdk_bin, &relay.url(), &key, &cache, false).await;
    assert_eq!(first.flags, flags, "the SDK holds every flag");
    let relay_peak_rss_kib = relay.rss_kib().1;
    // A replica takes the environment whole from the primary.
    let token = crate::cluster::replicate_token(&relay, dir, "replica").await;
    let revision =
        relay.status().await.environments.iter().find(|e| e.name == "big").expect("big").head_revision;
    let mut replica =
        Relay::start_replica(&dir.join("replica"), &[relay.url()], &token, &["--quota-flags", &quota]).await;
    // A replica's admin tokens are the primary's.
    replica.admin_secret = Some(relay.admin_token());
    replica.wait_head("big", revision).await;
    let replica_peak_rss_kib = replica.rss_kib().1;
    replica.kill9();
    replica.wait(guard).await;
    relay.kill9();
    relay.wait(guard).await;
    // The replica restarted with its upstream down serves what it stored
    // (loaded and checksummed), whole.
    let mut replica =
        Relay::start_replica(&dir.join("replica"), &[relay.url()], &token, &["--quota-flags", &quota]).await;
    let mut raw =
        Subscriber::connect(replica.channel().await, &key, None).await.expect("subscribe to the replica");
    raw.next_change(guard).await.expect("the restarted replica serves what it stored");
    assert_eq!(raw.flags.len(), flags, "the replica stored every flag");
    drop(raw);
    replica.kill9();
    replica.wait(guard).await;
    let cold = sdk_child(sdk_bin, &relay.url(), &key, &cache, true).await;
    // Restarted: the environment loaded from the store, every flag served.
    let mut restarted = Relay::start(&dir.join("relay"), &["--quota-flags", &quota]).await;
    let mut raw = Subscriber::connect(restarted.channel().await, &key, None).await.expect("subscribe");
    raw.next_change(guard).await.expect("the restarted relay serves the snapshot");
    assert_eq!(raw.flags.len(), flags, "every flag loaded");
    drop(raw);
    let relay_restart_peak_rss_kib = restarted.rss_kib().1;
    restarted.kill9();
    restarted.wait(guard).await;
    LargeReport {
        flags,
        snapshot_bytes,
        chunks,
        relay_peak_rss_kib,
        relay_restart_peak_rss_kib,
        replica_peak_rss_kib,
        sdk: [first, cold],
    }
}

/// Items and bytes of keys and values per batch of a new generation, as
/// the relay writes one (`BATCH` and `BATCH_BYTES` in
/// `relay/src/store/sled/generation.rs`, private to the relay: keep the
/// two in step).
const RELAY_BATCH_ITEMS: usize = 100;
const RELAY_BATCH_BYTES: usize = 128 << 10;

/// How [`sled_floor`] writes: as a relay filling an environment, or as a
/// replica taking it whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloorWrites {
    /// Batches of 1,000 flags, each one transaction of its items, an audit
    /// record per item and the metadata (`Relay::create_filled_env`).
    Fill,
    /// A received snapshot of 4,096 items or more (`store/sled/generation.rs`):
    /// the items in batches of 100 (or 128 KiB) into a new generation of the items
    /// tree, flushed after each MiB of them and at the end, then one
    /// transaction of the metadata; no audit records (a replica writes
    /// none for a received snapshot).
    /// Below 4,096 items a replica commits in one transaction instead:
    /// this mode measures the bulk path only.
    Replica,
}

/// What sled alone holds while it is written as a relay fills an
/// environment, or a replica takes one ([`sled_floor`]).
#[derive(Debug, Clone)]
pub struct SledFloor {
    /// Items written.
    pub flags: usize,
    /// Their encoded bytes, KiB.
    pub data_kib: u64,
    /// This process's anonymous memory before sled was opened, KiB.
    pub start_anon_kib: u64,
    /// Its anonymous memory at the largest, sampled after every commit (a
    /// fill) or every batch and flush (a replica), KiB.
    pub peak_anon_kib: u64,
    /// Its peak resident memory (`VmHWM`), KiB.
    pub peak_kib: u64,
    /// Its file-backed resident memory (its code) at the end, KiB.
    pub file_kib: u64,
}

/// Bytes of one audit record as the relay writes it for a created flag
/// (serialised JSON: the record, its YAML diff summarised, two hashes):
/// the average of a filling relay's heap profile, 20,000 records in
/// 8.3 MiB (docs/RESILIENCE.md §5).
const AUDIT_RECORD_BYTES: usize = 435;

/// `resilience sled-floor`: sled alone, in this process, written the way a
/// relay fills an environment ([`FloorWrites::Fill`]: batches of 1,000
/// flags, each batch one transaction of its items under the relay's keys,
/// one audit record per item under its revision and sequence, and the
/// environment's metadata) or a replica takes one
/// ([`FloorWrites::Replica`]), with the relay's default page cache (16
/// MiB), keeping nothing itself. What it holds is what a relay's sled
/// store holds on the same writes, before any of the relay's own memory.
pub fn sled_floor(
    dir: &Path,
    flags: usize,
    description_bytes: usize,
    cache_bytes: u64,
    writes: FloorWrites,
) -> SledFloor {
    use prost::Message;
    use sled::Transactional;
    let start_anon_kib = self_status_kib("RssAnon:");
    let db = sled::Config::new()
        .path(dir.join("sled-floor"))
        .cache_capacity(cache_bytes)
        .open()
        .expect("sled opens");
    let tree = |name: &str| db.open_tree(name).expect("tree opens");
    let (meta, items, audit) = (tree("meta"), tree("items/big"), tree("audit/big"));
    let (mut data, mut peak_anon_kib, mut unflushed) = (0u64, start_anon_kib, 0u64);
    for (batch, start) in (0..flags).step_by(1_000).enumerate() {
        let revision = batch as u64 + 1;
        let encoded: Vec<(Vec<u8>, Vec<u8>)> = (start..(start + 1_000).min(flags))
            .map(|i| {
                let mut f = crate::relay::bool_flag(&format!("f-{i}"), true);
                f.description = "d".repeat(description_bytes);
                let mut key = vec![1u8];
                key.extend_from_slice(f.key.as_bytes());
                (key, f.encode_to_vec())
            })
            .collect();
        let bytes = encoded.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum::<u64>();
        data += encoded.iter().map(|(_, v)| v.len() as u64).sum::<u64>();
        if writes == FloorWrites::Replica {
            // The relay's generation batches, whichever bound comes
            // first; sampled after each.
            let mut rest = encoded.as_slice();
            while !rest.is_empty() {
                let (mut n, mut size) = (0, 0);
                while n < rest.len() && n < RELAY_BATCH_ITEMS && size < RELAY_BATCH_BYTES {
                    size += rest[n].0.len() + rest[n].1.len();
                    n += 1;
                }
                let mut b = sled::Batch::default();
                for (key, value) in &rest[..n] {
                    b.insert(key.as_slice(), value.as_slice());
                }
                items.apply_batch(b).expect("sled applies the batch");
                peak_anon_kib = peak_anon_kib.max(self_status_kib("RssAnon:"));
                rest = &rest[n..];
            }
            unflushed += bytes;
            // As the relay does: each MiB as it is written, and the rest
            // before the transaction that makes the generation current.
            if unflushed >= 1 << 20 || start + 1_000 >= flags {
                db.flush().expect("sled flushes");
                unflushed = 0;
            }
            // And after the flush.
            peak_anon_kib = peak_anon_kib.max(self_status_kib("RssAnon:"));
            continue;
        }
        (&meta, &items, &audit)
            .transaction(|(m, it, au)| {
                for (seq, (key, value)) in encoded.iter().enumerate() {
                    it.insert(key.as_slice(), value.as_slice())?;
                    let mut pos = revision.to_be_bytes().to_vec();
                    pos.extend_from_slice(&(seq as u32).to_be_bytes());
                    au.insert(pos, vec![b'a'; AUDIT_RECORD_BYTES])?;
                }
                m.insert("env/big", revision.to_be_bytes().to_vec())?;
                Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
            })
            .expect("sled commits");
        db.flush().expect("sled flushes");
        peak_anon_kib = peak_anon_kib.max(self_status_kib("RssAnon:"));
    }
    if writes == FloorWrites::Replica {
        // The generation made current, with the metadata.
        meta.transaction(|m| {
            m.insert("items-gen/big", 1u64.to_be_bytes().to_vec())?;
            m.insert("env/big", 1u64.to_be_bytes().to_vec())?;
            Ok::<_, sled::transaction::ConflictableTransactionError<()>>(())
        })
        .expect("sled commits");
        db.flush().expect("sled flushes");
        peak_anon_kib = peak_anon_kib.max(self_status_kib("RssAnon:"));
    }
    // The floor is only a floor if everything was written.
    assert_eq!(items.len(), flags, "sled holds every item");
    let records = if writes == FloorWrites::Fill { flags } else { 0 };
    assert_eq!(audit.len(), records, "sled holds every audit record");
    SledFloor {
        flags,
        data_kib: data / 1024,
        start_anon_kib,
        peak_anon_kib,
        peak_kib: self_peak_rss_kib(),
        file_kib: self_status_kib("RssFile:"),
    }
}

/// This process's VmHWM, KiB.
pub fn self_peak_rss_kib() -> u64 {
    self_status_kib("VmHWM:")
}

/// This process's VmRSS, KiB.
pub fn self_rss_kib() -> u64 {
    self_status_kib("VmRSS:")
}

fn self_status_kib(field: &str) -> u64 {
    // A missing file or field would report 0 KiB: a false figure, so fail.
    std::fs::read_to_string("/proc/self/status")
        .expect("this process's /proc status")
        .lines()
        .find_map(|l| l.strip_prefix(field)?.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"))
}
