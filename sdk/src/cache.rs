//! The last-known-good cache: one sled value holding the applied snapshot
//! (raw items, cursor, checksum). Written from the sync side only, debounced,
//! as a single atomic insert followed by a flush, so a crash leaves the old
//! or the new snapshot, never a torn one. Loaded at `build()` before any
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
use crate::raw::CacheBlob;
use flagstream_core::{Limits, Snapshot};

/// How long opening waits for a cache directory locked by a client that
/// is going away (see [`Cache::open`]).
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_millis(500);

/// How often it tries again meanwhile.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(20);

/// sled key of the snapshot value.
pub(crate) const KEY: &[u8] = b"snapshot";

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
        let blob = held.to_blob(now_ms(), key_fingerprint);
        db.insert(KEY, blob.encode_to_vec())?;
        db.flush()?;
        self.last = Some(held.clone());
        Ok(true)
    }
}

impl Cache {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic mid-write leaves sled consistent (atomic insert); the
        // bookkeeping here is two plain fields.
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
            match sled::Config::new().path(dir).open() {
                Ok(db) => {
                    make_private(dir).map_err(private)?;
                    return Ok(Cache {
                        state: Arc::new(std::sync::Mutex::new(State { db: Some(db), last: None })),
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
        let value = match &self.state().db {
            Some(db) => db.get(KEY)?,
            None => None,
        };
        let Some(value) = value else { return Ok(None) };
        // One copy into `Bytes`, so every item decodes as a slice of it
        // rather than an allocation of its own.
        let blob = CacheBlob::decode(bytes::Bytes::copy_from_slice(&value))?;
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
