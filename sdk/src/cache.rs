//! The last-known-good cache: the applied snapshot (raw items, cursor,
//! checksum) as a header value in sled and the items in part files of
//! about 1 MiB beside it (`parts/`, named by the header's generation), so
//! a write never holds a copy of the whole snapshot, and nothing keeps one
//! after. Written from the sync side only, debounced: the new generation's
//! files (synced), the header (flushed), then the other generations' files
//! removed, so a crash leaves the old or the new snapshot, never a torn
//! one. Loaded at `build()` before any
//! network; whatever fails to decode or verify is reported and ignored,
//! never trusted. Compiled with the `cache` feature (on by default) only;
//! it knows nothing of the client: the client's tasks (`client/tasks.rs`)
//! call it.

use std::path::Path;
use std::sync::Arc;

use prost::Message;

use crate::clock::now_ms;
use crate::error::CacheError;
use crate::held::{CachedHeld, Held};
use crate::private_dir::make_private;
use crate::raw::{CACHE_FORMAT, CACHE_FORMAT_PARTS, CACHE_PART_BYTES, CacheBlob, CachePart};
use flagstream_core::{Limits, Snapshot};

/// How long opening waits for a cache directory locked by a client that
/// is going away (see [`Cache::open`]).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How often it tries again meanwhile.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// sled's page cache for the client's cache (sled's default is 1 GiB).
/// The client reads its cache once, at start, and only writes the header
/// to sled after (the parts are files).
const CACHE_CAPACITY: u64 = 4 << 20;

/// sled key of the snapshot's header ([`CacheBlob`]).
pub(crate) const KEY: &[u8] = b"snapshot";

/// Prefix of format 2's parts' keys in sled.
const PART_PREFIX: &[u8] = b"part/";

/// The directory of the part files, inside the cache directory.
const PARTS_DIR: &str = "parts";

/// The file name of part `i` ([`CachePart`]) of generation `generation`
/// (format 3).
fn part_file(generation: u64, i: u32) -> String {
    format!("{generation:016x}-{i:08x}")
}

/// The generation and index a part file's name carries, if it is one.
fn parse_part_file(name: &str) -> Option<(u64, u32)> {
    let (generation, i) = name.split_once('-')?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !hex(generation, 16) || !hex(i, 8) {
        return None;
    }
    Some((u64::from_str_radix(generation, 16).ok()?, u32::from_str_radix(i, 16).ok()?))
}

/// Syncs a directory's entries to disk.
fn sync_dir(dir: &Path) -> Result<(), CacheError> {
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(|e| part_error(dir, e))
}

/// Writes `bytes` to a new file at `path` (readable by this user only)
/// and syncs it.
fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}

fn part_error(path: &Path, source: std::io::Error) -> CacheError {
    CacheError::PartFile { path: path.display().to_string(), source }
}

/// Format 2's sled key of part `i`: `part/` and `i` as 4 big-endian bytes.
fn part_key(i: u32) -> [u8; 9] {
    let mut key = *b"part/\0\0\0\0";
    key[PART_PREFIX.len()..].copy_from_slice(&i.to_be_bytes());
    key
}

/// The fingerprint that ties a cache to its SDK key (not a secret: a
/// 64-bit hash, so a cache file does not reveal the key).
pub(crate) fn key_fingerprint(sdk_key: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(sdk_key.as_bytes())
}

/// An open cache. Clones share one database handle, which [`Cache::close`]
/// drops for all of them at once.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    /// Serialises writes, so the final write at drop can never be
    /// overtaken by a debounced one still in flight.
    state: Arc<std::sync::Mutex<State>>,
}

#[derive(Debug)]
struct State {
    /// `None` once closed: sled (and its directory lock) is released.
    db: Option<sled::Db>,
    /// Where the part files are (`parts/` in the cache directory).
    parts_dir: std::path::PathBuf,
    /// The held state last stored (compared by pointer).
    last: Option<Arc<Held>>,
}

impl State {
    /// Stores `held` unless closed or already stored; whether it wrote.
    fn store(&mut self, held: &Arc<Held>, key_fingerprint: u64) -> Result<bool, CacheError> {
        let Some(db) = &self.db else { return Ok(false) };
        if self.last.as_ref().is_some_and(|last| Arc::ptr_eq(last, held)) {
            return Ok(false);
        }
        let mut blob = held.to_blob(now_ms(), key_fingerprint);
        let parts = CachePart::split(
            std::mem::take(&mut blob.flags),
            std::mem::take(&mut blob.segments),
            CACHE_PART_BYTES,
        );
        blob.parts = parts.len() as u32;
        let previous = db.get(KEY)?.and_then(|v| CacheBlob::decode(bytes::Bytes::from_owner(v)).ok());
        // One more than any header's that decodes (formats 1 and 2 carry
        // 0), so a live header's files are never overwritten.
        blob.generation = previous.map_or(1, |h| h.generation.wrapping_add(1));
        // The new generation's part files first, one part encoded at a time,
        // each synced, then their directory: durable before the header that
        // names them. (Not sled values: sled keeps every value it writes in
        // its page cache, whatever the capacity, so a 50 MiB snapshot cost
        // 50 MiB more of the client's memory after each write.)
        let dir = &self.parts_dir;
        // Made private once, when created (opening the cache made the whole
        // directory private; the files are written 0600): not a walk of
        // every part file on every write.
        let created = !dir.exists();
        if created {
            make_private(dir)
                .map_err(|e| CacheError::Private { path: dir.display().to_string(), source: e })?;
        }
        for (i, part) in parts.iter().enumerate() {
            let path = dir.join(part_file(blob.generation, i as u32));
            write_synced(&path, &part.encode_to_vec()).map_err(|e| part_error(&path, e))?;
        }
        sync_dir(dir)?;
        if created && let Some(parent) = dir.parent() {
            sync_dir(parent)?; // the new directory's own entry
        }
        // Then the header, one key replaced atomically: a crash leaves the
        // old header with its files or the new one with its files.
        db.insert(KEY, blob.encode_to_vec())?;
        db.flush()?;
        self.last = Some(held.clone());
        // Then what the new header does not name: other generations' part
        // files (the previous one's, a crashed write's; nothing else in the
        // directory is touched) and format 2's parts in sled. The snapshot
        // is stored whatever happens here: a failure is logged, and the
        // next write removes what this one left.
        if let Err(e) = self.remove_stale(db, blob.generation, blob.parts) {
            tracing::warn!(error = %e, "removing the cache's old parts failed; the next write tries again");
        }
        Ok(true)
    }

    /// Removes the part files of generations other than `generation` (and
    /// its files past `parts`), and format 2's part values.
    fn remove_stale(&self, db: &sled::Db, generation: u64, parts: u32) -> Result<(), CacheError> {
        let dir = &self.parts_dir;
        for entry in std::fs::read_dir(dir).map_err(|e| part_error(dir, e))? {
            let entry = entry.map_err(|e| part_error(dir, e))?;
            let Some((g, i)) = entry.file_name().to_str().and_then(parse_part_file) else {
                continue; // not a part file: not ours to remove
            };
            if (g != generation || i >= parts) && entry.file_type().is_ok_and(|t| t.is_file()) {
                std::fs::remove_file(entry.path()).map_err(|e| part_error(&entry.path(), e))?;
            }
        }
        let mut stale = sled::Batch::default();
        for key in db.scan_prefix(PART_PREFIX).keys() {
            stale.remove(key?);
        }
        db.apply_batch(stale)?;
        Ok(())
    }
}

impl Cache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic mid-write leaves sled consistent (atomic insert) and at
        // worst stray part files the next write removes; the bookkeeping
        // here is plain fields.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens (or creates) the cache under `dir`.
    /// The directory is the cache's own: it is made mode 0700 before sled
    /// writes to it (sled's later files are then out of other users' reach
    /// whatever the umask), and the files sled made 0600.
    pub(crate) fn open(dir: &Path) -> Result<Cache, CacheError> {
        let private = |e| CacheError::Private { path: dir.display().to_string(), source: e };
        make_private(dir).map_err(private)?;
        // A directory locked by a client of this process that was just
        // dropped is released a moment later, when sled's background
        // threads let go of it (seen on a loaded machine): retried for up
        // to LOCK_WAIT. A directory a live client holds stays locked, and
        // this fails after that wait (the client then runs without a
        // cache, logged). No event tells when sled's threads are done, so
        // this polls.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match sled::Config::new().path(dir).cache_capacity(CACHE_CAPACITY).open() {
                Ok(db) => {
                    make_private(dir).map_err(private)?;
                    return Ok(Cache {
                        state: Arc::new(std::sync::Mutex::new(State {
                            db: Some(db),
                            parts_dir: dir.join(PARTS_DIR),
                            last: None,
                        })),
                    });
                }
                Err(sled::Error::Io(e))
                    if e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("lock") =>
                {
                    if std::time::Instant::now() >= deadline {
                        let path = dir.display().to_string();
                        return Err(CacheError::Locked { path, source: sled::Error::Io(e) });
                    }
                    std::thread::sleep(LOCK_RETRY);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The cached snapshot, if there is a usable one.
    pub(crate) fn load(
        &self,
        key_fingerprint: u64,
        limits: &Limits,
    ) -> Result<Option<(CachedHeld, Arc<Snapshot>)>, CacheError> {
        let state = self.state();
        let Some(db) = &state.db else { return Ok(None) };
        let Some(value) = db.get(KEY)? else { return Ok(None) };
        // No copy: every item decodes as a slice of the buffer it was read
        // into (sled's for the header, a part file's, or a format 2 part
        // value's) rather than an allocation of its own (a 50 MiB cache is
        // not held twice while the client starts).
        let mut blob = CacheBlob::decode(bytes::Bytes::from_owner(value))?;
        // Parts are read only for a header this client can use: another
        // key's or format's cache is refused by `from_blob` unread.
        let missing = |part| CacheError::MissingPart { part, parts: blob.parts };
        if blob.key_fingerprint == key_fingerprint {
            for i in 0..blob.parts {
                let value = match blob.format {
                    CACHE_FORMAT => {
                        let path = state.parts_dir.join(part_file(blob.generation, i));
                        match std::fs::read(&path) {
                            Ok(v) => bytes::Bytes::from(v),
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing(i)),
                            Err(e) => return Err(part_error(&path, e)),
                        }
                    }
                    CACHE_FORMAT_PARTS => {
                        bytes::Bytes::from_owner(db.get(part_key(i))?.ok_or_else(|| missing(i))?)
                    }
                    _ => break, // format 1: the items are inline
                };
                let part = CachePart::decode(value)?;
                blob.flags.extend(part.flags);
                blob.segments.extend(part.segments);
            }
        }
        drop(state);
        Ok(Some(Held::from_blob(blob, key_fingerprint, limits)?))
    }

    /// Replaces the cached snapshot with `held` atomically and durably,
    /// unless it is the one stored last or the cache was closed. Returns
    /// whether it wrote.
    pub(crate) fn store(&self, held: &Arc<Held>, key_fingerprint: u64) -> Result<bool, CacheError> {
        self.state().store(held, key_fingerprint)
    }

    /// The final write when the client is dropped: under one lock, stores
    /// `held` if it is not what was stored last, then closes the database
    /// for every clone (a debounced write queued behind this finds it closed,
    /// and the directory lock is released now, even if that write fails).
    pub(crate) fn close(&self, held: Option<&Arc<Held>>, key_fingerprint: u64) -> Result<bool, CacheError> {
        let mut state = self.state();
        let wrote = match held {
            Some(r) => state.store(r, key_fingerprint),
            None => Ok(false),
        };
        state.db = None;
        wrote
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use flagstream_core::wire::flag_to_proto;
    use flagstream_core::{Flag, FlagSet};

    use super::*;

    /// A held state of `n` flags, each carrying `pad` bytes of description.
    fn held(n: usize, pad: usize) -> Arc<Held> {
        let yaml = "{key: k, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}";
        let template: Flag = serde_yaml_ng::from_str(yaml).expect("flag");
        let set = FlagSet {
            flags: (0..n)
                .map(|i| Flag {
                    key: format!("flag-{i:05}"),
                    description: "d".repeat(pad),
                    ..template.clone()
                })
                .collect(),
            segments: vec![],
        };
        let bytes: Vec<Bytes> =
            set.flags.iter().map(|f| Bytes::from(flag_to_proto(f).encode_to_vec())).collect();
        let (held, _) =
            Held::from_items("e1".into(), 7, bytes, Vec::new(), &Limits::default()).expect("valid");
        Arc::new(held)
    }

    /// Part files, and format 2's parts in sled.
    fn stored_parts(cache: &Cache) -> usize {
        let state = cache.state();
        let files = std::fs::read_dir(&state.parts_dir).map_or(0, |d| d.count());
        files + state.db.as_ref().unwrap().scan_prefix(PART_PREFIX).count()
    }

    fn header(cache: &Cache) -> CacheBlob {
        let state = cache.state();
        CacheBlob::decode(&state.db.as_ref().unwrap().get(KEY).unwrap().expect("a header")[..]).unwrap()
    }

    /// A write cut short before its header (part files of the next
    /// generation written, the header not) leaves the previous snapshot
    /// served; the next write replaces the stray files.
    #[test]
    fn a_write_cut_short_before_its_header_leaves_the_previous_snapshot() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let first = held(3_000, 1_000);
        assert!(cache.store(&first, 9).unwrap());
        let h = header(&cache);
        assert!(h.parts >= 3 && stored_parts(&cache) == h.parts as usize);
        let parts_dir = cache.state().parts_dir.clone();
        for i in 0..=h.parts {
            std::fs::write(parts_dir.join(part_file(h.generation + 1, i)), b"\x0a\x01x").unwrap();
        }
        let (loaded, snap) = cache.load(9, &Limits::default()).unwrap().expect("served");
        assert_eq!((loaded.checksum, snap.len()), (first.checksum, 3_000), "the previous snapshot");

        let second = held(2_000, 1_000);
        assert!(cache.store(&second, 9).unwrap());
        let next = header(&cache);
        assert_eq!(next.generation, h.generation + 1);
        assert_eq!(stored_parts(&cache), next.parts as usize, "only the files the header names are left");
        let (loaded, snap) = cache.load(9, &Limits::default()).unwrap().expect("served");
        assert_eq!((loaded.checksum, snap.len()), (second.checksum, 2_000));
    }

    /// Only part files are removed from `parts/`: another file or a
    /// directory there is left alone and does not fail the write.
    #[test]
    fn only_part_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(cache.store(&held(3_000, 1_000), 9).unwrap());
        let parts_dir = cache.state().parts_dir.clone();
        std::fs::write(parts_dir.join("notes.txt"), b"mine").unwrap();
        std::fs::create_dir(parts_dir.join(part_file(1, 99))).unwrap();
        assert!(cache.store(&held(10, 10), 9).unwrap());
        assert!(parts_dir.join("notes.txt").exists() && parts_dir.join(part_file(1, 99)).is_dir());
        assert_eq!(parse_part_file("notes.txt"), None);
        assert_eq!(parse_part_file(&part_file(7, 3)), Some((7, 3)));
        assert_eq!(cache.load(9, &Limits::default()).unwrap().expect("stored").1.len(), 10);
    }

    /// A cache of format 2 (the parts as sled values, as SDKs before format
    /// 3 wrote it) is still served, and the next write removes its parts.
    #[test]
    fn format_2_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let h = held(3_000, 1_000);
        let mut blob = h.to_blob(1, 9);
        let parts = CachePart::split(
            std::mem::take(&mut blob.flags),
            std::mem::take(&mut blob.segments),
            CACHE_PART_BYTES,
        );
        blob.format = CACHE_FORMAT_PARTS;
        blob.parts = parts.len() as u32;
        let db = cache.state().db.clone().unwrap();
        for (i, part) in parts.iter().enumerate() {
            db.insert(part_key(i as u32), part.encode_to_vec()).unwrap();
        }
        db.insert(KEY, blob.encode_to_vec()).unwrap();
        let (loaded, snap) = cache.load(9, &Limits::default()).unwrap().expect("served");
        assert_eq!((loaded.checksum, snap.len()), (h.checksum, 3_000));

        assert!(cache.store(&held(10, 10), 9).unwrap());
        assert_eq!(db.scan_prefix(PART_PREFIX).count(), 0, "format 2's parts were removed");
        assert_eq!(stored_parts(&cache), 1);
        assert_eq!(cache.load(9, &Limits::default()).unwrap().expect("stored").1.len(), 10);
    }

    /// A snapshot larger than a part is stored in parts and loads back
    /// whole; a smaller one written next removes the parts it does not use.
    #[test]
    fn parts_round_trip_and_shrink() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let big = held(3_000, 1_000); // ~3 MiB
        assert!(cache.store(&big, 9).unwrap());
        assert!(stored_parts(&cache) >= 3, "{} parts", stored_parts(&cache));
        let (loaded, snap) = cache.load(9, &Limits::default()).unwrap().expect("stored");
        assert_eq!((loaded.revision, loaded.checksum, snap.len()), (7, big.checksum, 3_000));

        let small = held(10, 10);
        assert!(cache.store(&small, 9).unwrap());
        assert_eq!(stored_parts(&cache), 1, "the parts beyond the new count were removed");
        let (_, snap) = cache.load(9, &Limits::default()).unwrap().expect("stored");
        assert_eq!(snap.len(), 10);
    }

    /// Parts no readable header names (left by a format-1 rewrite, or a
    /// header that no longer decodes) are removed by the next write.
    #[test]
    fn leftover_parts_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(cache.store(&held(3_000, 1_000), 9).unwrap());
        let db = cache.state().db.clone().unwrap();
        db.insert(KEY, b"\x0a\xff not a header".to_vec()).unwrap();
        let small = held(10, 10);
        assert!(cache.store(&small, 9).unwrap());
        assert_eq!(stored_parts(&cache), 1, "only the new part is left");
        assert_eq!(cache.load(9, &Limits::default()).unwrap().expect("stored").1.len(), 10);
    }

    /// A header naming a part that is not stored is reported, not served.
    #[test]
    fn a_missing_part_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        assert!(cache.store(&held(3_000, 1_000), 9).unwrap());
        let h = header(&cache);
        std::fs::remove_file(cache.state().parts_dir.join(part_file(h.generation, 1))).unwrap();
        let Err(err) = cache.load(9, &Limits::default()) else { panic!("a cache missing a part was served") };
        assert!(matches!(err, CacheError::MissingPart { part: 1, .. }), "{err}");
    }

    /// A cache of format 1 (one value, the items inline), as SDKs before
    /// format 2 wrote it, is still served.
    #[test]
    fn format_1_is_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let h = held(50, 100);
        let mut blob = h.to_blob(1, 9);
        blob.format = crate::raw::CACHE_FORMAT_INLINE;
        cache.state().db.clone().unwrap().insert(KEY, blob.encode_to_vec()).unwrap();
        let (loaded, snap) = cache.load(9, &Limits::default()).unwrap().expect("served");
        assert_eq!((loaded.checksum, snap.len()), (h.checksum, 50));
    }
}
