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
pub(crate) type AuditPos = (u64, u32);

/// Who makes a write: the authenticated principal and the caller's
/// unverified note of whom it acts for.
#[derive(Debug, Clone, Default)]
pub(crate) struct Who {
    /// The admin token's name (derived by the relay).
    pub principal: String,
    /// The `x-flagstream-actor` header; may be empty.
    pub on_behalf_of: String,
}

impl Who {
    /// A principal without a note (the relay itself, the demo).
    pub(crate) fn relay(name: &str) -> Who {
        Who { principal: name.to_owned(), on_behalf_of: String::new() }
    }
}

/// One audit log entry.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct AuditRecord {
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
    /// What changed: a unified diff of the item's YAML before and after
    /// (at most [`MAX_DIFF`] bytes; larger items are summarised). Not
    /// serialised when empty, so records from before it hash as they did.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
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

/// Largest diff kept in a record, bytes.
pub(crate) const MAX_DIFF: usize = 16 << 10;
/// Items larger than this (either side) get a summary, not a line diff:
/// diffing 100,000-key segments would cost more than the write.
const MAX_DIFFED_ITEM: usize = 256 << 10;

/// An item's bytes as YAML (the file format), for the diff.
fn yaml(kind: Kind, bytes: &[u8]) -> String {
    use prost::Message;
    let text = match kind {
        Kind::Flag => flagstream_proto::v1::Flag::decode(bytes)
            .map_err(|e| e.to_string())
            .and_then(|p| flagstream::wire::flag_from_proto(&p).map_err(|e| e.to_string()))
            .and_then(|mut f| {
                // Versions change on every write; the diff shows content.
                (f.version, f.revision) = (0, 0);
                serde_yaml_ng::to_string(&f).map_err(|e| e.to_string())
            }),
        Kind::Segment => flagstream_proto::v1::Segment::decode(bytes)
            .map_err(|e| e.to_string())
            .and_then(|p| flagstream::wire::segment_from_proto(&p).map_err(|e| e.to_string()))
            .and_then(|mut s| {
                (s.version, s.revision) = (0, 0);
                serde_yaml_ng::to_string(&s).map_err(|e| e.to_string())
            }),
    };
    text.unwrap_or_else(|e| format!("<undecodable: {e}>\n"))
}

/// The diff of one change: unified, capped at [`MAX_DIFF`] bytes.
pub(crate) fn diff(kind: Kind, before: Option<&[u8]>, after: Option<&[u8]>) -> String {
    let size = |b: Option<&[u8]>| b.map_or(0, <[u8]>::len);
    if size(before).max(size(after)) > MAX_DIFFED_ITEM {
        return format!(
            "(item too large to diff: {} bytes before, {} bytes after)\n",
            size(before),
            size(after)
        );
    }
    let (old, new) =
        (before.map(|b| yaml(kind, b)).unwrap_or_default(), after.map(|b| yaml(kind, b)).unwrap_or_default());
    let mut d = similar::TextDiff::from_lines(&old, &new)
        .unified_diff()
        .context_radius(2)
        .header("before", "after")
        .to_string();
    if d.len() > MAX_DIFF {
        let mut end = MAX_DIFF;
        while !d.is_char_boundary(end) {
            end -= 1;
        }
        let total = d.len();
        d.truncate(end);
        d.push_str(&format!("\n… (diff cut at {MAX_DIFF} of {total} bytes)\n"));
    }
    d
}

/// The records of one revision, chained after `head`, which moves to the
/// last of them, each with its position. `before` gives each changed
/// item's bytes before the write (for the diff).
pub(crate) fn seal<'a>(
    changes: &[Change],
    before: impl Fn(&super::state::ItemKey) -> Option<&'a [u8]>,
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
                diff: diff(c.key.0, before(&c.key), c.bytes.as_deref()),
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
pub(crate) struct Verification {
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
