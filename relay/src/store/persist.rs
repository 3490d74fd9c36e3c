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

use arc_swap::ArcSwap;
use bytes::Bytes;
use flagstream::{FlagSet, Limits, Snapshot, wire};
use flagstream_proto::v1 as pb;
use prost::Message;
use serde::{Deserialize, Serialize};
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};
use tokio::sync::{Mutex, watch};

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
    /// SHA-256 (hex) of the SDK key.
    pub sdk_key_hash: String,
}

/// Where an audit entry sits: `(revision, sequence within the revision)`.
pub type AuditPos = (u64, u32);

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditRecord {
    /// Revision of the write.
    pub revision: u64,
    /// Who wrote.
    pub actor: String,
    /// When, Unix ms.
    pub time_unix_ms: u64,
    /// Item kind.
    pub kind: Kind,
    /// Item key.
    pub key: String,
    /// Version before (0 = created).
    pub version_before: u64,
    /// Version after (for a delete, the version it had).
    pub version_after: u64,
    /// `create`, `update` or `delete`.
    pub action: String,
    /// The writer's comment.
    pub comment: String,
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

fn corrupt(what: String, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Corrupt { what, source: Box::new(e) }
}

/// Serialises a record; a failure is reported, never written as an empty
/// (corrupt) value.
fn to_json<T: Serialize>(what: &str, v: &T) -> Result<Vec<u8>, StoreError> {
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
    let audit_trimmed = trim_audit(db, &name, retention.audit_floor(meta.revision))?;
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
    Ok(Env {
        head: watch::channel(meta.revision).0,
        state: ArcSwap::from_pointee(state),
        write: Mutex::new(()),
        meta: ArcSwap::from_pointee(meta),
        poisoned: std::sync::atomic::AtomicBool::new(false),
    })
}

/// Removes an environment's trees and metadata.
pub(crate) fn delete_env(db: &sled::Db, meta: &sled::Tree, name: &str) -> Result<(), StoreError> {
    meta.remove(meta_key(name))?;
    for prefix in ["items", "log", "audit"] {
        db.drop_tree(format!("{prefix}/{name}"))?;
    }
    Ok(())
}

/// Keys of the audit records of revisions up to `floor`.
fn expired_audit(audit: &sled::Tree, floor: u64) -> Result<Vec<sled::IVec>, StoreError> {
    let end = floor.saturating_add(1).to_be_bytes();
    Ok(audit.range(..end.as_slice()).keys().collect::<Result<_, _>>()?)
}

/// Drops the audit records past the retention (after it was lowered, or
/// from before retention existed); returns how many.
pub(crate) fn trim_audit(db: &sled::Db, name: &str, floor: Option<u64>) -> Result<usize, StoreError> {
    let Some(floor) = floor else { return Ok(0) };
    let audit = db.open_tree(format!("audit/{name}"))?;
    let expired = expired_audit(&audit, floor)?;
    for k in &expired {
        audit.remove(k)?;
    }
    Ok(expired.len())
}

/// Commits one revision atomically; returns how many audit records it
/// dropped for the retention.
#[allow(clippy::too_many_arguments)]
pub(crate) fn commit(
    db: &sled::Db,
    meta_tree: &sled::Tree,
    meta: &EnvMeta,
    changes: &[Change],
    entry: &LogEntry,
    trimmed: &[u64],
    audit_floor: Option<u64>,
    actor: &str,
    comment: &str,
) -> Result<usize, StoreError> {
    let name = &meta.name;
    let items = db.open_tree(format!("items/{name}"))?;
    let log = db.open_tree(format!("log/{name}"))?;
    let audit = db.open_tree(format!("audit/{name}"))?;
    let now = now_ms();
    let records: Vec<(Vec<u8>, Vec<u8>)> = changes
        .iter()
        .enumerate()
        .map(|(seq, c)| {
            let action = match (c.version_before, &c.bytes) {
                (_, None) => "delete",
                (0, Some(_)) => "create",
                _ => "update",
            };
            let rec = AuditRecord {
                revision: entry.revision,
                actor: actor.to_owned(),
                time_unix_ms: now,
                kind: c.key.0,
                key: c.key.1.clone(),
                version_before: c.version_before,
                version_after: c.version_after,
                action: action.to_owned(),
                comment: comment.to_owned(),
            };
            let mut k = entry.revision.to_be_bytes().to_vec();
            k.extend_from_slice(&(seq as u32).to_be_bytes());
            Ok((k, to_json("audit record", &rec)?))
        })
        .collect::<Result<_, StoreError>>()?;
    // Audit records past the retention: normally one revision's worth.
    let expired = match audit_floor {
        Some(floor) => expired_audit(&audit, floor)?,
        None => Vec::new(),
    };
    let entry_json = to_json("change-log entry", entry)?;
    let meta_json = to_json("environment metadata", meta)?;
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
            m.insert(meta_key(name).as_bytes(), meta_json.as_slice())?;
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

/// Who last changed an item, and at which revision, from the audit log
/// (scans back at most 10,000 entries).
pub(crate) fn last_actor(db: &sled::Db, env: &str, kind: Kind, key: &str) -> Option<String> {
    let audit = db.open_tree(format!("audit/{env}")).ok()?;
    audit.iter().rev().take(10_000).filter_map(Result::ok).find_map(|(_, v)| {
        let r: AuditRecord = serde_json::from_slice(&v).ok()?;
        (r.kind == kind && r.key == key).then(|| format!("{} at revision {}", r.actor, r.revision))
    })
}

/// Audit entries, newest first, optionally for one item and strictly
/// before a `(revision, sequence)` position (a page token). Each comes with
/// its own position, the token of the page after it.
pub(crate) fn audit(
    db: &sled::Db,
    env: &str,
    key: Option<(Kind, &str)>,
    limit: usize,
    before: Option<(u64, u32)>,
) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
    let tree = db.open_tree(format!("audit/{env}"))?;
    let mut upper = before.map_or(u64::MAX, |b| b.0).to_be_bytes().to_vec();
    upper.extend_from_slice(&before.map_or(u32::MAX, |b| b.1).to_be_bytes());
    let mut out = Vec::new();
    for r in tree.range(..upper.as_slice()).rev() {
        let (k, v) = r?;
        let rec: AuditRecord =
            serde_json::from_slice(&v).map_err(|e| corrupt(format!("audit log of {env:?}"), e))?;
        let pos = match (k.get(..8), k.get(8..12)) {
            (Some(rev), Some(seq)) => (
                u64::from_be_bytes(rev.try_into().unwrap_or([0; 8])),
                u32::from_be_bytes(seq.try_into().unwrap_or([0; 4])),
            ),
            _ => return Err(corrupt(format!("audit key in {env:?}"), std::io::Error::other("short key"))),
        };
        if key.is_none_or(|(k, name)| rec.kind == k && rec.key == name) {
            out.push((pos, rec));
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}
