//! The audit log: one record per changed item, written in the commit's
//! transaction (tree `audit/{env}`, key = revision ‖ sequence, big-endian),
//! with the authenticated principal, and hash-chained: each record holds
//! the hash of the one before it and its own hash over both, and the
//! environment's metadata holds the newest hash, so a record edited,
//! removed or inserted on disk breaks the chain ([`verify`]). Also paging,
//! "who last changed this item", and the retention.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;
use super::op::Change;
use super::persist::{corrupt, to_json};
use super::state::Kind;

/// Where an audit entry sits: `(revision, sequence within the revision)`.
pub type AuditPos = (u64, u32);

/// Who makes a write: the authenticated principal and the caller's
/// unverified note of whom it acts for.
#[derive(Debug, Clone, Default)]
pub struct Who {
    /// The admin token's name (derived by the relay).
    pub principal: String,
    /// The `x-flagstream-actor` header; may be empty.
    pub on_behalf_of: String,
}

impl Who {
    /// A principal without a note (the relay itself, the demo).
    pub fn relay(name: &str) -> Who {
        Who { principal: name.to_owned(), on_behalf_of: String::new() }
    }
}

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct AuditRecord {
    /// Revision of the write.
    pub revision: u64,
    /// The authenticated principal (older records: the client's actor).
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
    /// Whom the caller says it acts for (unverified).
    #[serde(default)]
    pub on_behalf_of: String,
    /// Hash of the previous record of this environment.
    #[serde(default)]
    pub prev_hash: String,
    /// SHA-256 (hex) of this record with `hash` empty; empty for records
    /// from before the chain.
    #[serde(default)]
    pub hash: String,
}

impl AuditRecord {
    /// The hash this record must carry: SHA-256 of its JSON with `hash`
    /// empty (the JSON includes `prev_hash`).
    fn compute_hash(&self) -> Result<String, StoreError> {
        let mut unsealed = self.clone();
        unsealed.hash.clear();
        Ok(hex::encode(Sha256::digest(to_json("audit record", &unsealed)?)))
    }
}

fn key_of(pos: AuditPos) -> Vec<u8> {
    let mut k = pos.0.to_be_bytes().to_vec();
    k.extend_from_slice(&pos.1.to_be_bytes());
    k
}

fn pos_of(env: &str, k: &[u8]) -> Result<AuditPos, StoreError> {
    match (k.get(..8).map(<[u8; 8]>::try_from), k.get(8..12).map(<[u8; 4]>::try_from)) {
        (Some(Ok(rev)), Some(Ok(seq))) => Ok((u64::from_be_bytes(rev), u32::from_be_bytes(seq))),
        _ => Err(corrupt(format!("audit key in {env:?}"), std::io::Error::other("short key"))),
    }
}

/// A sled key and value.
pub(crate) type KeyValue = (Vec<u8>, Vec<u8>);

/// The records of one revision, chained after `head`, which moves to the
/// last of them: `(key, JSON)` pairs for the commit's transaction.
pub(crate) fn seal(
    changes: &[Change],
    revision: u64,
    now: u64,
    who: &Who,
    comment: &str,
    head: &mut String,
) -> Result<Vec<KeyValue>, StoreError> {
    changes
        .iter()
        .enumerate()
        .map(|(seq, c)| {
            let action = match (c.version_before, &c.bytes) {
                (_, None) => "delete",
                (0, Some(_)) => "create",
                _ => "update",
            };
            let mut rec = AuditRecord {
                revision,
                actor: who.principal.clone(),
                time_unix_ms: now,
                kind: c.key.0,
                key: c.key.1.clone(),
                version_before: c.version_before,
                version_after: c.version_after,
                action: action.to_owned(),
                comment: comment.to_owned(),
                on_behalf_of: who.on_behalf_of.clone(),
                prev_hash: head.clone(),
                hash: String::new(),
            };
            rec.hash = rec.compute_hash()?;
            head.clone_from(&rec.hash);
            Ok((key_of((revision, seq as u32)), to_json("audit record", &rec)?))
        })
        .collect()
}

/// Keys of the audit records of revisions up to `floor`.
pub(crate) fn expired(audit: &sled::Tree, floor: u64) -> Result<Vec<sled::IVec>, StoreError> {
    let end = floor.saturating_add(1).to_be_bytes();
    Ok(audit.range(..end.as_slice()).keys().collect::<Result<_, _>>()?)
}

/// Drops the audit records past the retention (after it was lowered, or
/// from before retention existed); returns how many.
pub(crate) fn trim(db: &sled::Db, name: &str, floor: Option<u64>) -> Result<usize, StoreError> {
    let Some(floor) = floor else { return Ok(0) };
    let audit = db.open_tree(format!("audit/{name}"))?;
    let expired = expired(&audit, floor)?;
    for k in &expired {
        audit.remove(k)?;
    }
    Ok(expired.len())
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
pub(crate) fn list(
    db: &sled::Db,
    env: &str,
    key: Option<(Kind, &str)>,
    limit: usize,
    before: Option<AuditPos>,
) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
    let tree = db.open_tree(format!("audit/{env}"))?;
    let upper = key_of(before.unwrap_or((u64::MAX, u32::MAX)));
    let mut out = Vec::new();
    for r in tree.range(..upper.as_slice()).rev() {
        let (k, v) = r?;
        let rec: AuditRecord =
            serde_json::from_slice(&v).map_err(|e| corrupt(format!("audit log of {env:?}"), e))?;
        let pos = pos_of(env, &k)?;
        if key.is_none_or(|(k, name)| rec.kind == k && rec.key == name) {
            out.push((pos, rec));
            if out.len() >= limit {
                break;
            }
        }
    }
    Ok(out)
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// Records whose hash was recomputed.
    pub checked: u64,
    /// The first broken record and what is wrong with it.
    pub broken: Option<(AuditPos, String)>,
}

/// Walks an environment's audit records oldest first and checks every
/// link: each record's hash, each `prev_hash` against the record before,
/// and the newest hash against `head` (the environment's metadata). The
/// oldest retained record's `prev_hash` is taken as given (older records
/// were dropped by the retention); records from before the chain (no
/// hash) are skipped, and the chain restarts after them.
pub(crate) fn verify(db: &sled::Db, env: &str, head: &str) -> Result<Verification, StoreError> {
    let tree = db.open_tree(format!("audit/{env}"))?;
    let mut checked = 0;
    let mut prev: Option<String> = None;
    let mut last: Option<AuditPos> = None;
    for r in tree.iter() {
        let (k, v) = r?;
        let pos = pos_of(env, &k)?;
        let rec: AuditRecord = match serde_json::from_slice(&v) {
            Ok(r) => r,
            Err(e) => {
                return Ok(Verification { checked, broken: Some((pos, format!("does not decode: {e}"))) });
            }
        };
        if rec.hash.is_empty() {
            prev = None;
            continue;
        }
        checked += 1;
        if rec.compute_hash()? != rec.hash {
            return Ok(Verification {
                checked,
                broken: Some((pos, "its content does not match its hash".into())),
            });
        }
        if let Some(p) = &prev
            && *p != rec.prev_hash
        {
            return Ok(Verification {
                checked,
                broken: Some((pos, "its prev_hash is not the previous record's hash (a record before it was removed, inserted or edited)".into())),
            });
        }
        if rec.revision != pos.0 {
            return Ok(Verification { checked, broken: Some((pos, "stored under another revision".into())) });
        }
        prev = Some(rec.hash);
        last = Some(pos);
    }
    let end = prev.unwrap_or_default();
    if end != head {
        let at = last.unwrap_or((0, 0));
        return Ok(Verification {
            checked,
            broken: Some((at, "the newest record is not the one the environment's metadata seals (records at the end were removed or added)".into())),
        });
    }
    Ok(Verification { checked, broken: None })
}
