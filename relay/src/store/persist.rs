//! The sled layout and every read and write of it.
//!
//! Trees: `meta` (`env/{name}` → JSON [`EnvMeta`]); per environment
//! `items/{name}` (`kind byte ‖ key` → the item's protobuf bytes),
//! `log/{name}` (revision, big-endian → JSON [`LogEntry`]) and
//! `audit/{name}` (revision ‖ sequence, big-endian → JSON [`AuditRecord`]).
//! A commit writes all four in one sled transaction, so a crash leaves
//! either the old revision or the new one, never a mix.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use bytes::Bytes;
use flagstream::{FlagSet, Limits, Snapshot, wire};
use flagstream_proto::v1 as pb;
use prost::Message;
use serde::{Deserialize, Serialize};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::audit::{self, Who};
use super::op::Change;
use super::state::{EnvState, Item, ItemKey, Kind, LogEntry, item_hash};
use super::{Env, Retention, StoreError, now_ms, trim_log};
use crate::metrics::Metrics;

/// Persistent facts about one environment.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EnvMeta {
    /// Name.
    pub name: String,
    /// Free text.
    pub description: String,
    /// Store epoch: random, made at creation, kept across restarts.
    pub epoch: String,
    /// Head revision.
    pub revision: u64,
    /// Checksum at head, to verify the items on load.
    pub checksum: u64,
    /// Commit time of the head revision.
    pub committed_unix_ms: u64,
    /// Creation time.
    pub created_unix_ms: u64,
    /// SHA-256 (hex) of the SDK key, before environments had several keys
    /// (migrated into `sdk_keys` on load).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sdk_key_hash: String,
    /// The environment's SDK keys.
    #[serde(default)]
    pub sdk_keys: Vec<SdkKeyRecord>,
    /// Number of SDK keys ever made (ids `k1`, `k2`, ...; never reused).
    #[serde(default)]
    pub keys_made: u64,
    /// Hash of the newest audit record: the chain must end here.
    #[serde(default)]
    pub audit_head: String,
}

impl EnvMeta {
    /// Moves a pre-multi-key `sdk_key_hash` into `sdk_keys` as `k1`.
    pub(crate) fn migrate_keys(&mut self) {
        if self.sdk_keys.is_empty() && !self.sdk_key_hash.is_empty() {
            self.sdk_keys.push(SdkKeyRecord {
                id: "k1".into(),
                name: "default".into(),
                hash: std::mem::take(&mut self.sdk_key_hash),
                created_unix_ms: self.created_unix_ms,
                expires_unix_ms: 0,
                created_by: "relay".into(),
            });
            self.keys_made = self.keys_made.max(1);
        }
    }
}

/// One SDK key of an environment; the secret only as its hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct SdkKeyRecord {
    /// `k1`, `k2`, ...
    pub id: String,
    /// Free text.
    pub name: String,
    /// SHA-256 (hex) of the secret.
    pub hash: String,
    /// Creation time, Unix ms.
    pub created_unix_ms: u64,
    /// When it stops working, Unix ms; 0: never.
    pub expires_unix_ms: u64,
    /// The admin token that made it.
    pub created_by: String,
}

impl SdkKeyRecord {
    /// Whether it works at `now` (Unix ms).
    pub fn valid_at(&self, now: u64) -> bool {
        self.expires_unix_ms == 0 || now < self.expires_unix_ms
    }
}

fn meta_key(name: &str) -> String {
    format!("env/{name}")
}

fn item_key(key: &ItemKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.1.len() + 1);
    k.push(key.0 as u8);
    k.extend_from_slice(key.1.as_bytes());
    k
}

pub(crate) fn corrupt(what: String, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Corrupt { what, source: Box::new(e) }
}

/// Serialises a record; a failure is reported, never written as an empty
/// (corrupt) value.
pub(crate) fn to_json<T: Serialize>(what: &str, v: &T) -> Result<Vec<u8>, StoreError> {
    serde_json::to_vec(v).map_err(|e| corrupt(format!("{what} (while encoding)"), e))
}

/// Every environment's metadata.
pub(crate) fn load_metas(meta: &sled::Tree) -> Result<Vec<EnvMeta>, StoreError> {
    meta.scan_prefix(b"env/")
        .map(|r| {
            let (k, v) = r?;
            serde_json::from_slice(&v)
                .map_err(|e| corrupt(format!("metadata {:?}", String::from_utf8_lossy(&k)), e))
        })
        .collect()
}

pub(crate) fn put_meta(meta: &sled::Tree, m: &EnvMeta) -> Result<(), StoreError> {
    meta.insert(meta_key(&m.name), to_json("environment metadata", m)?)?;
    Ok(())
}

/// Loads one environment into memory, verifying its checksum.
pub(crate) fn load_env(
    db: &sled::Db,
    meta: EnvMeta,
    limits: &Limits,
    retention: Retention,
    metrics: &Metrics,
) -> Result<Env, StoreError> {
    let mut meta = meta;
    meta.migrate_keys();
    let name = meta.name.clone();
    let items_tree = db.open_tree(format!("items/{name}"))?;
    let mut items = BTreeMap::new();
    let mut set = FlagSet::default();
    for r in items_tree.iter() {
        let (k, v) = r?;
        let key_str =
            String::from_utf8(k[1..].to_vec()).map_err(|e| corrupt(format!("item key in {name:?}"), e))?;
        let bytes = Bytes::copy_from_slice(&v);
        let what = || format!("item {key_str:?} in environment {name:?}");
        let (kind, version) = match k.first() {
            Some(1) => {
                let p = pb::Flag::decode(bytes.clone()).map_err(|e| corrupt(what(), e))?;
                let f = wire::flag_from_proto(&p).map_err(|e| corrupt(what(), e))?;
                let v = f.version;
                set.flags.push(f);
                (Kind::Flag, v)
            }
            Some(2) => {
                let p = pb::Segment::decode(bytes.clone()).map_err(|e| corrupt(what(), e))?;
                let s = wire::segment_from_proto(&p).map_err(|e| corrupt(what(), e))?;
                let v = s.version;
                set.segments.push(s);
                (Kind::Segment, v)
            }
            _ => return Err(corrupt(what(), std::io::Error::other("unknown item kind byte"))),
        };
        let hash = item_hash(kind, &key_str, &bytes);
        items.insert((kind, key_str), Item { bytes, hash, version });
    }
    let log_tree = db.open_tree(format!("log/{name}"))?;
    let mut log = VecDeque::new();
    for r in log_tree.iter() {
        let (_, v) = r?;
        let e: LogEntry =
            serde_json::from_slice(&v).map_err(|e| corrupt(format!("change log of {name:?}"), e))?;
        log.push_back(e);
    }
    // Only entries up to the committed head count (a later one cannot exist
    // with atomic commits, but never trust more than meta says).
    log.retain(|e| e.revision <= meta.revision);
    // Retention may have been lowered since: drop the excess on disk too.
    for revision in trim_log(&mut log, retention) {
        log_tree.remove(revision.to_be_bytes())?;
    }
    let audit_trimmed = audit::trim(db, &name, retention.audit_floor(meta.revision))?;
    if audit_trimmed > 0 {
        tracing::info!(env = %name, records = audit_trimmed, "audit records past the retention dropped");
        metrics.audit_trimmed.inc_by(audit_trimmed as u64);
    }
    let snapshot = match Snapshot::compile(&set, limits) {
        Ok(s) => s,
        Err(e) => {
            // Stored data predates tighter limits: serve it, loudly.
            tracing::error!(env = %name, error = %e, "stored flags fail validation under the current limits");
            metrics.limit_hits.get_or_create(&vec![("limit", "stored_data_invalid".to_owned())]).inc();
            Snapshot::compile_unvalidated(&set, limits)
        }
    };
    let state = EnvState::new(
        name.clone(),
        meta.epoch.clone(),
        meta.revision,
        meta.committed_unix_ms,
        Arc::new(items),
        Arc::new(log),
        Arc::new(snapshot.with_cursor(&meta.epoch, meta.revision)),
    );
    if state.checksum != meta.checksum {
        return Err(StoreError::Corrupt {
            what: format!("environment {name:?}"),
            source: format!(
                "checksum of stored items {:#018x} does not match the committed {:#018x}",
                state.checksum, meta.checksum
            )
            .into(),
        });
    }
    tracing::info!(env = %name, revision = meta.revision, items = state.items.len(), "environment loaded");
    Ok(Env::new(state, meta))
}

/// Removes an environment's trees and metadata.
pub(crate) fn delete_env(db: &sled::Db, meta: &sled::Tree, name: &str) -> Result<(), StoreError> {
    meta.remove(meta_key(name))?;
    for prefix in ["items", "log", "audit"] {
        db.drop_tree(format!("{prefix}/{name}"))?;
    }
    Ok(())
}

/// Commits one revision atomically; returns how many audit records it
/// dropped for the retention. Seals the revision's audit records onto the
/// environment's chain and moves `meta.audit_head` to the last of them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn commit(
    db: &sled::Db,
    meta_tree: &sled::Tree,
    meta: &mut EnvMeta,
    changes: &[Change],
    entry: &LogEntry,
    trimmed: &[u64],
    audit_floor: Option<u64>,
    who: &Who,
    comment: &str,
) -> Result<usize, StoreError> {
    let name = meta.name.clone();
    let items = db.open_tree(format!("items/{name}"))?;
    let log = db.open_tree(format!("log/{name}"))?;
    let audit = db.open_tree(format!("audit/{name}"))?;
    let records = audit::seal(changes, entry.revision, now_ms(), who, comment, &mut meta.audit_head)?;
    // Audit records past the retention: normally one revision's worth.
    let expired = match audit_floor {
        Some(floor) => audit::expired(&audit, floor)?,
        None => Vec::new(),
    };
    let entry_json = to_json("change-log entry", entry)?;
    let meta_json = to_json("environment metadata", &*meta)?;
    (meta_tree, &items, &log, &audit)
        .transaction(|(m, i, l, a)| {
            for c in changes {
                match &c.bytes {
                    Some(b) => i.insert(item_key(&c.key), b.as_ref())?,
                    None => i.remove(item_key(&c.key))?,
                };
            }
            l.insert(&entry.revision.to_be_bytes(), entry_json.as_slice())?;
            for r in trimmed {
                l.remove(&r.to_be_bytes())?;
            }
            for (k, v) in &records {
                a.insert(k.as_slice(), v.as_slice())?;
            }
            for k in &expired {
                a.remove(k)?;
            }
            m.insert(meta_key(&name).as_bytes(), meta_json.as_slice())?;
            Ok::<(), ConflictableTransactionError<()>>(())
        })
        .map(|()| expired.len())
        .map_err(|e: TransactionError<()>| match e {
            TransactionError::Storage(e) => StoreError::Storage(e),
            TransactionError::Abort(()) => {
                StoreError::Storage(sled::Error::Unsupported("transaction aborted".into()))
            }
        })
}
