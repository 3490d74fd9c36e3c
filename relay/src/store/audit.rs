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

/// The name of the relay's own chain (admin token events), stored like an
/// archive (its head with the archives' heads): each record at `(n, 0)`,
/// `n` counting from 1. No environment can have the name.
pub(crate) const RELAY_CHAIN: &str = "*";

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
    /// Item kind; `None` for an access event (SDK key, token,
    /// environment), which is not about an item. Left out when `None`, so
    /// item records hash as they always did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<Kind>,
    /// Item key; for an access event, the SDK key's id, the token's or the
    /// environment's name.
    pub key: String,
    /// Version before (0 = created).
    pub version_before: u64,
    /// Version after (for a delete, the version it had).
    pub version_after: u64,
    /// `create`, `update` or `delete` (items), or an access event
    /// ([`Access::action`]: `sdk_key.create`, `token.revoke`, ...).
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
                kind: Some(c.key.0),
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

/// Access events recorded on an environment's chain. Their records carry
/// names, ids, roles and times, never a secret or its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// An SDK key was made.
    SdkKeyCreate,
    /// An SDK key was replaced by a new one (the old one kept for a grace).
    SdkKeyRotate,
    /// An SDK key was removed.
    SdkKeyRevoke,
    /// The environment was created (with its first SDK key).
    EnvironmentCreate,
    /// The environment was deleted (the last record of its archived chain).
    EnvironmentDelete,
    /// An admin token was created (on the relay's chain).
    TokenCreate,
    /// An admin token was revoked (on the relay's chain).
    TokenRevoke,
    /// The environment's CORS origins were replaced.
    CorsOriginsSet,
}

impl Access {
    /// The record's `action`.
    pub(crate) fn action(self) -> &'static str {
        match self {
            Access::SdkKeyCreate => "sdk_key.create",
            Access::SdkKeyRotate => "sdk_key.rotate",
            Access::SdkKeyRevoke => "sdk_key.revoke",
            Access::EnvironmentCreate => "environment.create",
            Access::EnvironmentDelete => "environment.delete",
            Access::TokenCreate => "token.create",
            Access::TokenRevoke => "token.revoke",
            Access::CorsOriginsSet => "environment.cors",
        }
    }
}

/// One access event on the chain that `head` ends: the record at the
/// environment's `revision` (its position within the revision is the
/// backend's), sealed, and `head` moved to it. `details` is a short
/// `field: value` text (the record's `diff`) that must hold no secret.
pub(crate) fn seal_access(
    event: Access,
    subject: &str,
    details: String,
    revision: u64,
    who: &Who,
    head: &mut String,
) -> Result<AuditRecord, StoreError> {
    let mut rec = access_record(event, subject, details, who);
    seal_onto(&mut rec, revision, head)?;
    Ok(rec)
}

/// An access event's record, not yet sealed (see [`seal_onto`]).
pub(crate) fn access_record(event: Access, subject: &str, details: String, who: &Who) -> AuditRecord {
    AuditRecord {
        revision: 0,
        actor: who.principal.clone(),
        time_unix_ms: super::now_ms(),
        kind: None,
        key: subject.to_owned(),
        version_before: 0,
        version_after: 0,
        action: event.action().to_owned(),
        comment: String::new(),
        on_behalf_of: who.on_behalf_of.clone(),
        diff: details,
        prev_hash: String::new(),
        hash: String::new(),
    }
}

/// Seals `rec` at `revision` onto the chain that `head` ends, and moves
/// `head` to it.
pub(crate) fn seal_onto(rec: &mut AuditRecord, revision: u64, head: &mut String) -> Result<(), StoreError> {
    rec.revision = revision;
    rec.prev_hash.clone_from(head);
    rec.hash = rec.compute_hash()?;
    head.clone_from(&rec.hash);
    Ok(())
}

/// The outcome of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verification {
    /// Records whose hash was recomputed.
    pub checked: u64,
    /// The first broken record and what is wrong with it.
    pub broken: Option<(AuditPos, String)>,
}

/// A walk along an environment's chain, record by record, oldest first
/// (fed in pages, so memory stays bounded whatever the log's size).
///
/// Every record's hash is recomputed and each `prev_hash` checked against
/// the record before. The oldest retained record's `prev_hash` is taken as
/// given (older records were dropped by the retention). Records without a
/// hash (written before the chain existed) may only come first: once a
/// hashed record was seen, a record without one is a break, and the first
/// hashed record after unhashed ones must start the chain (an empty
/// `prev_hash`). So blanking a record's hash never hides an edit.
#[derive(Debug)]
pub(crate) struct Walk {
    checked: u64,
    prev: Option<String>,
    last: Option<AuditPos>,
    /// Records without a hash were seen (and no hashed one yet).
    unhashed: bool,
    /// The head the walk must reach.
    head: String,
    /// Whether a record with the head's hash was seen.
    head_seen: bool,
    broken: Option<(AuditPos, String)>,
}

impl Walk {
    /// A walk that must end at `head`.
    pub(crate) fn new(head: &str) -> Walk {
        Walk {
            checked: 0,
            prev: None,
            last: None,
            unhashed: false,
            head: head.to_owned(),
            head_seen: head.is_empty(),
            broken: None,
        }
    }

    /// The position after which the walk goes on (`None`: from the start).
    pub(crate) fn last(&self) -> Option<AuditPos> {
        self.last
    }

    /// The break found so far.
    pub(crate) fn broken(&self) -> Option<&(AuditPos, String)> {
        self.broken.as_ref()
    }

    fn fail(&mut self, pos: AuditPos, why: impl Into<String>) {
        self.broken = Some((pos, why.into()));
    }

    /// Checks the next record (or, for one that does not decode, why).
    /// `false`: the chain is broken here, stop.
    pub(crate) fn push(
        &mut self,
        pos: AuditPos,
        rec: Result<AuditRecord, String>,
    ) -> Result<bool, StoreError> {
        if self.broken.is_some() {
            return Ok(false);
        }
        self.last = Some(pos);
        let rec = match rec {
            Ok(r) => r,
            Err(e) => {
                self.fail(pos, format!("does not decode: {e}"));
                return Ok(false);
            }
        };
        if rec.hash.is_empty() {
            if self.prev.is_some() {
                self.fail(pos, "it has no hash, but records before it do (a hash was removed: the chain starts at the first hashed record)");
                return Ok(false);
            }
            self.unhashed = true;
            return Ok(true);
        }
        self.checked += 1;
        if rec.compute_hash()? != rec.hash {
            self.fail(pos, "its content does not match its hash");
            return Ok(false);
        }
        match &self.prev {
            Some(p) if *p != rec.prev_hash => {
                self.fail(pos, "its prev_hash is not the previous record's hash (a record before it was removed, inserted or edited)");
                return Ok(false);
            }
            None if self.unhashed && !rec.prev_hash.is_empty() => {
                self.fail(
                    pos,
                    "the records before it have no hash, but it links to one (a hash before it was removed)",
                );
                return Ok(false);
            }
            _ => {}
        }
        if rec.revision != pos.0 {
            self.fail(pos, "stored under another revision");
            return Ok(false);
        }
        if rec.hash == self.head {
            self.head_seen = true;
        }
        self.prev = Some(rec.hash);
        Ok(true)
    }

    /// The outcome. The chain must end at the head the walk started with
    /// or, when records were appended during the walk (an access event at
    /// the same revision), pass through it and end at `now`, the head read
    /// after the walk (`None`: the head moved to a later revision meanwhile,
    /// whose records the walk left out; the next walk checks their links).
    pub(crate) fn finish(self, now: Option<&str>) -> Verification {
        let Walk { checked, prev, last, head, head_seen, broken, .. } = self;
        if broken.is_some() {
            return Verification { checked, broken };
        }
        // No hashed record walked: the chain ends where it starts, at "".
        let end = prev.unwrap_or_default();
        if end != head && !(head_seen && now.is_none_or(|n| n == end)) {
            let at = last.unwrap_or((0, 0));
            return Verification {
                checked,
                broken: Some((at, "the newest record is not the one the environment's metadata seals (records at the end were removed or added)".into())),
            };
        }
        Verification { checked, broken: None }
    }
}

/// Checks a whole chain at once (see [`Walk`]); `records` oldest first.
#[cfg(test)]
pub(crate) fn verify(
    records: impl IntoIterator<Item = Result<(AuditPos, Result<AuditRecord, String>), StoreError>>,
    head: &str,
) -> Result<Verification, StoreError> {
    let mut walk = Walk::new(head);
    for r in records {
        let (pos, rec) = r?;
        if !walk.push(pos, rec)? {
            break;
        }
    }
    Ok(walk.finish(Some(head)))
}

#[cfg(test)]
mod tests;
