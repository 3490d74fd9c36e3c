//! The last-known-good cache: one sled value holding the applied snapshot
//! (raw items, cursor, checksum). Written from the sync side only, debounced,
//! as a single atomic insert followed by a flush, so a crash leaves the old
//! or the new snapshot, never a torn one. Loaded at `build()` before any
//! network; whatever fails to decode or verify is reported and ignored,
//! never trusted.

use std::path::Path;
use std::sync::Arc;

use prost::Message;

use crate::raw::CacheBlob;
use crate::replica::{ApplyError, CachedReplica, Replica};
use crate::{Limits, Snapshot};

/// sled key of the snapshot value.
pub(crate) const KEY: &[u8] = b"snapshot";

/// Cache problems; none of them stops the client.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// Another client (in this or another process) holds the directory.
    #[error("cache directory {path} is in use by another client (give each client its own cache_dir)")]
    Locked {
        /// The directory.
        path: String,
        /// sled's error.
        #[source]
        source: sled::Error,
    },
    /// The directory could not be made private to this user (mode 0700,
    /// files 0600): the cache is not used rather than left readable.
    #[error("cache directory {path} cannot be made private to this user (mode 0700)")]
    Private {
        /// The directory.
        path: String,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// sled failed.
    #[error("cache storage error")]
    Storage(#[from] sled::Error),
    /// The stored value does not decode.
    #[error("cache is corrupt or truncated")]
    Corrupt(#[from] prost::DecodeError),
    /// The stored snapshot does not verify or compile.
    #[error("cached snapshot is unusable")]
    Unusable(#[from] ApplyError),
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
    /// The replica last stored (compared by pointer).
    last: Option<Arc<Replica>>,
}

impl State {
    /// Stores `replica` unless closed or already stored; whether it wrote.
    fn store(&mut self, replica: &Arc<Replica>, key_fingerprint: u64) -> Result<bool, CacheError> {
        let Some(db) = &self.db else { return Ok(false) };
        if self.last.as_ref().is_some_and(|last| Arc::ptr_eq(last, replica)) {
            return Ok(false);
        }
        let blob = replica.to_blob(crate::client::now_ms(), key_fingerprint);
        db.insert(KEY, blob.encode_to_vec())?;
        db.flush()?;
        self.last = Some(replica.clone());
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
        match sled::Config::new().path(dir).open() {
            Ok(db) => {
                make_private(dir).map_err(private)?;
                Ok(Cache { state: Arc::new(std::sync::Mutex::new(State { db: Some(db), last: None })) })
            }
            Err(sled::Error::Io(e))
                if e.kind() == std::io::ErrorKind::WouldBlock || e.to_string().contains("lock") =>
            {
                Err(CacheError::Locked { path: dir.display().to_string(), source: sled::Error::Io(e) })
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The cached snapshot, if there is a usable one.
    pub(crate) fn load(
        &self,
        key_fingerprint: u64,
        limits: &Limits,
    ) -> Result<Option<(CachedReplica, Arc<Snapshot>)>, CacheError> {
        let value = match &self.state().db {
            Some(db) => db.get(KEY)?,
            None => None,
        };
        let Some(value) = value else { return Ok(None) };
        // One copy into `Bytes`, so every item decodes as a slice of it
        // rather than an allocation of its own.
        let blob = CacheBlob::decode(bytes::Bytes::copy_from_slice(&value))?;
        Ok(Some(Replica::from_blob(blob, key_fingerprint, limits)?))
    }

    /// Replaces the cached snapshot with `replica` atomically and durably,
    /// unless it is the one stored last or the cache was closed. Returns
    /// whether it wrote.
    pub(crate) fn store(&self, replica: &Arc<Replica>, key_fingerprint: u64) -> Result<bool, CacheError> {
        self.state().store(replica, key_fingerprint)
    }

    /// The final write when the client is dropped: under one lock, stores
    /// `replica` if it is not what was stored last, then closes the database
    /// for every clone (a debounced write queued behind this finds it closed,
    /// and the directory lock is released now, even if that write fails).
    pub(crate) fn close(
        &self,
        replica: Option<&Arc<Replica>>,
        key_fingerprint: u64,
    ) -> Result<bool, CacheError> {
        let mut state = self.state();
        let wrote = match replica {
            Some(r) => state.store(r, key_fingerprint),
            None => Ok(false),
        };
        state.db = None;
        wrote
    }
}

/// Makes `dir` (created if missing) mode 0700 and everything in it
/// owner-only: directories 0700, files 0600. Shared with the relay, whose
/// sled store needs the same (`flagstream-relay`'s `permission.rs`).
#[doc(hidden)]
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                make_private(&entry.path())?;
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
            }
        }
        Ok(())
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}
