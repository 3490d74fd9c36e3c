//! The audit log's records and chain: one record per changed item, written
//! in the commit's transaction by the backend, with the authenticated
//! principal, and hash-chained: each record holds the hash of the one
//! before it and its own hash over both, and the environment's metadata
//! holds the newest hash, so a record edited, removed or inserted in the
//! database breaks the chain ([`verify`]). Storage-independent: backends
//! store the records and hand them back in order.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::StoreError;
use super::op::Change;
use super::state::Kind;
use super::to_json;

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

/// The records of one revision, chained after `head`, which moves to the
/// last of them, each with its position.
pub(crate) fn seal(
    changes: &[Change],
    revision: u64,
    now: u64,
    who: &Who,
    comment: &str,
    head: &mut String,
) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
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
            Ok(((revision, seq as u32), rec))
        })
        .collect()
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
///
/// `records` yields every retained record oldest first, or for a record
/// that does not decode, why.
pub(crate) fn verify(
    records: impl IntoIterator<Item = Result<(AuditPos, Result<AuditRecord, String>), StoreError>>,
    head: &str,
) -> Result<Verification, StoreError> {
    let mut checked = 0;
    let mut prev: Option<String> = None;
    let mut last: Option<AuditPos> = None;
    for r in records {
        let (pos, rec) = r?;
        let rec = match rec {
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
