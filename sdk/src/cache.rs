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

/// An open cache.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    db: sled::Db,
    /// Serialises writes, so the final write at drop can never be
    /// overtaken by a debounced one still in flight.
    writes: Arc<std::sync::Mutex<Writes>>,
}

/// What has been written.
#[derive(Debug, Default)]
struct Writes {
    /// The replica last stored (compared by pointer).
    last: Option<Arc<Replica>>,
    /// Set by the final write: later writes are skipped.
    closed: bool,
}

impl Cache {
    /// Opens (or creates) the cache under `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Cache, CacheError> {
        match sled::Config::new().path(dir).open() {
            Ok(db) => Ok(Cache { db, writes: Arc::default() }),
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
        let Some(value) = self.db.get(KEY)? else { return Ok(None) };
        // One copy into `Bytes`, so every item decodes as a slice of it
        // rather than an allocation of its own.
        let blob = CacheBlob::decode(bytes::Bytes::copy_from_slice(&value))?;
        Ok(Some(Replica::from_blob(blob, key_fingerprint, limits)?))
    }

    /// Replaces the cached snapshot with `replica` atomically and durably,
    /// unless it is the one stored last or the cache was closed. Returns
    /// whether it wrote.
    pub(crate) fn store(&self, replica: &Arc<Replica>, key_fingerprint: u64) -> Result<bool, CacheError> {
        let mut writes = self.writes.lock().unwrap_or_else(|p| p.into_inner());
        if writes.closed || writes.last.as_ref().is_some_and(|last| Arc::ptr_eq(last, replica)) {
            return Ok(false);
        }
        let blob = replica.to_blob(crate::client::now_ms(), key_fingerprint);
        self.db.insert(KEY, blob.encode_to_vec())?;
        self.db.flush()?;
        writes.last = Some(replica.clone());
        Ok(true)
    }

    /// The final write when the client is dropped: stores `replica` if it is
    /// newer than what was stored, then refuses further writes (a debounced
    /// write still in flight cannot overwrite it with older data).
    pub(crate) fn close(
        &self,
        replica: Option<&Arc<Replica>>,
        key_fingerprint: u64,
    ) -> Result<bool, CacheError> {
        let wrote = match replica {
            Some(r) => self.store(r, key_fingerprint)?,
            None => false,
        };
        self.writes.lock().unwrap_or_else(|p| p.into_inner()).closed = true;
        Ok(wrote)
    }
}
