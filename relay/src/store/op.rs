//! Write operations and their planning: checking expected versions, applying
//! puts, deletes and patches to the model, validating the would-be
//! environment, and encoding each changed item once. Pure: no I/O.

use std::collections::BTreeMap;

use bytes::Bytes;
use flagstream::model::{Serve, Target};
use flagstream::{Flag, FlagSet, Limits, Segment, Snapshot, ValidationError, ValidationErrors, wire};
use flagstream_proto::v1 as pb;
use prost::Message;

use super::StoreError;
use super::state::{EnvState, ItemKey, Kind};

/// One requested change.
#[derive(Debug, Clone)]
pub enum Op {
    /// Create or replace a flag.
    PutFlag {
        /// The new flag (its version and revision are set by the store).
        flag: Flag,
        /// `Some(0)`: must not exist; `Some(n)`: must be at version n.
        expected: Option<u64>,
    },
    /// Delete a flag.
    DeleteFlag {
        /// Key.
        key: String,
        /// Expected version.
        expected: Option<u64>,
    },
    /// Create or replace a segment.
    PutSegment {
        /// The new segment.
        segment: Segment,
        /// Expected version.
        expected: Option<u64>,
    },
    /// Delete a segment.
    DeleteSegment {
        /// Key.
        key: String,
        /// Expected version.
        expected: Option<u64>,
    },
    /// Change parts of a flag.
    PatchFlag {
        /// Key.
        key: String,
        /// Expected version.
        expected: Option<u64>,
        /// The changes, applied in order.
        patches: Vec<pb::FlagPatch>,
    },
    /// Change a segment's key lists.
    PatchSegment {
        /// Key.
        key: String,
        /// Expected version.
        expected: Option<u64>,
        /// The changes, applied in order.
        patches: Vec<pb::SegmentPatch>,
    },
}

/// An item's version after a write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemVersion {
    /// Kind.
    pub kind: Kind,
    /// Key.
    pub key: String,
    /// Version now (for a delete: the version it had).
    pub version: u64,
    /// Whether it was deleted.
    pub deleted: bool,
}

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteResult {
    /// The environment revision after the write.
    pub revision: u64,
    /// Every item the write named.
    pub items: Vec<ItemVersion>,
}

/// One item that actually changes.
#[derive(Debug)]
pub(crate) struct Change {
    pub(crate) key: ItemKey,
    /// New encoding; `None` for a delete.
    pub(crate) bytes: Option<Bytes>,
    pub(crate) version_before: u64,
    pub(crate) version_after: u64,
}

/// The outcome of planning a write.
#[derive(Debug)]
pub(crate) struct Plan {
    pub(crate) changes: Vec<Change>,
    pub(crate) versions: Vec<ItemVersion>,
    pub(crate) snapshot: Snapshot,
}

#[derive(Debug, Clone, PartialEq)]
enum Model {
    Flag(Flag),
    Segment(Segment),
}

/// Plans `ops` against `state` for `revision`. `last_actor` answers who
/// last changed an item, for conflict messages.
pub(crate) fn plan(
    state: &EnvState,
    ops: Vec<Op>,
    revision: u64,
    limits: &Limits,
    last_actor: impl Fn(Kind, &str) -> Option<String>,
) -> Result<Plan, StoreError> {
    let snap = &state.snapshot;
    let original = |key: &ItemKey| -> Option<Model> {
        match key.0 {
            Kind::Flag => snap.flag(&key.1).cloned().map(Model::Flag),
            Kind::Segment => snap.segment(&key.1).cloned().map(Model::Segment),
        }
    };
    // Touched items: key → (final model or None, named by which op index).
    let mut touched: BTreeMap<ItemKey, Option<Model>> = BTreeMap::new();
    let mut order: Vec<ItemKey> = Vec::new();
    for (i, op) in ops.into_iter().enumerate() {
        let (key, expected) = match &op {
            Op::PutFlag { flag, expected } => ((Kind::Flag, flag.key.clone()), *expected),
            Op::DeleteFlag { key, expected } | Op::PatchFlag { key, expected, .. } => {
                ((Kind::Flag, key.clone()), *expected)
            }
            Op::PutSegment { segment, expected } => ((Kind::Segment, segment.key.clone()), *expected),
            Op::DeleteSegment { key, expected } | Op::PatchSegment { key, expected, .. } => {
                ((Kind::Segment, key.clone()), *expected)
            }
        };
        let current = match touched.get(&key) {
            Some(m) => m.clone(),
            None => original(&key),
        };
        let current_version = state.items.get(&key).map_or(0, |it| it.version);
        if let Some(expected) = expected
            && (expected != current_version || (expected == 0) != current.is_none())
        {
            return Err(StoreError::Conflict {
                kind: key.0,
                key: key.1.clone(),
                expected,
                current: current_version,
                changed_by: last_actor(key.0, &key.1),
            });
        }
        let not_found =
            || StoreError::ItemNotFound { env: state.name.clone(), kind: key.0, key: key.1.clone() };
        let next = match op {
            Op::PutFlag { flag, .. } => Some(Model::Flag(flag)),
            Op::PutSegment { segment, .. } => Some(Model::Segment(segment)),
            Op::DeleteFlag { .. } | Op::DeleteSegment { .. } => {
                current.as_ref().ok_or_else(not_found)?;
                None
            }
            Op::PatchFlag { patches, .. } => match current {
                Some(Model::Flag(mut f)) => {
                    patch_flag(&mut f, &patches, i)?;
                    Some(Model::Flag(f))
                }
                _ => return Err(not_found()),
            },
            Op::PatchSegment { patches, .. } => match current {
                Some(Model::Segment(mut s)) => {
                    patch_segment(&mut s, &patches, i)?;
                    Some(Model::Segment(s))
                }
                _ => return Err(not_found()),
            },
        };
        if !touched.contains_key(&key) {
            order.push(key.clone());
        }
        touched.insert(key, next);
    }

    let mut changes = Vec::new();
    let mut versions = Vec::new();
    let mut upserts = FlagSet::default();
    let (mut deleted_flags, mut deleted_segments) = (Vec::new(), Vec::new());
    for key in order {
        let before = original(&key);
        let version_before = state.items.get(&key).map_or(0, |it| it.version);
        let mut after = touched.remove(&key).flatten();
        // Versions and revisions are the store's to set; compare without them.
        if let (Some(m), Some(b)) = (&mut after, &before) {
            let (v, r) = match b {
                Model::Flag(f) => (f.version, f.revision),
                Model::Segment(s) => (s.version, s.revision),
            };
            stamp(m, v, r);
        }
        if after == before {
            versions.push(ItemVersion {
                kind: key.0,
                key: key.1,
                version: version_before,
                deleted: after.is_none(),
            });
            continue;
        }
        let version_after = match &mut after {
            Some(m) => {
                stamp(m, version_before + 1, revision);
                version_before + 1
            }
            None => version_before,
        };
        let bytes = after.as_ref().map(|m| -> Bytes {
            match m {
                Model::Flag(f) => wire::flag_to_proto(f).encode_to_vec().into(),
                Model::Segment(s) => wire::segment_to_proto(s).encode_to_vec().into(),
            }
        });
        match after {
            Some(Model::Flag(f)) => upserts.flags.push(f),
            Some(Model::Segment(s)) => upserts.segments.push(s),
            None if key.0 == Kind::Flag => deleted_flags.push(key.1.clone()),
            None => deleted_segments.push(key.1.clone()),
        }
        versions.push(ItemVersion {
            kind: key.0,
            key: key.1.clone(),
            version: version_after,
            deleted: bytes.is_none(),
        });
        changes.push(Change { key, bytes, version_before, version_after });
    }
    let snapshot = if changes.is_empty() {
        Snapshot::empty()
    } else {
        snap.apply(&upserts, &deleted_flags, &deleted_segments, limits)?
    };
    Ok(Plan { changes, versions, snapshot })
}

/// Sets an item's version, and its revision unless it is unchanged.
fn stamp(m: &mut Model, version: u64, revision: u64) {
    match m {
        Model::Flag(f) => {
            f.version = version;
            f.revision = revision;
        }
        Model::Segment(s) => {
            s.version = version;
            s.revision = revision;
        }
    }
}

fn patch_flag(f: &mut Flag, patches: &[pb::FlagPatch], op_index: usize) -> Result<(), StoreError> {
    use pb::flag_patch::Op as P;
    for (j, p) in patches.iter().enumerate() {
        let path = format!("ops[{op_index}].patches[{j}]");
        match &p.op {
            None => return Err(invalid(path, "empty patch")),
            Some(P::SetOn(on)) => f.on = *on,
            Some(P::SetOffVariation(v)) => f.off_variation = *v,
            Some(P::SetFallthrough(s)) => f.fallthrough = wire::serve_from_proto(&path, Some(s))?,
            Some(P::AddTargets(t)) => match f.targets.iter_mut().find(|x| x.variation == t.variation) {
                Some(target) => {
                    for k in &t.keys {
                        if !target.values.contains(k) {
                            target.values.push(k.clone());
                        }
                    }
                }
                None => f.targets.push(Target { variation: t.variation, values: t.keys.clone() }),
            },
            Some(P::RemoveTargets(t)) => {
                for target in f.targets.iter_mut().filter(|x| x.variation == t.variation) {
                    target.values.retain(|k| !t.keys.contains(k));
                }
                f.targets.retain(|x| !x.values.is_empty());
            }
            Some(P::SetRuleServe(rs)) => {
                let serve: Serve = wire::serve_from_proto(&format!("{path}.serve"), rs.serve.as_ref())?;
                match f.rules.iter_mut().find(|r| r.id == rs.rule_id && !r.id.is_empty()) {
                    Some(rule) => rule.serve = serve,
                    None => {
                        return Err(invalid(
                            format!("{path}.rule_id"),
                            format!("flag {:?} has no rule with id {:?}", f.key, rs.rule_id),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

fn patch_segment(s: &mut Segment, patches: &[pb::SegmentPatch], op_index: usize) -> Result<(), StoreError> {
    use pb::segment_patch::Op as P;
    for (j, p) in patches.iter().enumerate() {
        match &p.op {
            Some(P::AddIncluded(k)) => add_keys(&mut s.included, &k.keys),
            Some(P::RemoveIncluded(k)) => s.included.retain(|x| !k.keys.contains(x)),
            Some(P::AddExcluded(k)) => add_keys(&mut s.excluded, &k.keys),
            Some(P::RemoveExcluded(k)) => s.excluded.retain(|x| !k.keys.contains(x)),
            None => return Err(invalid(format!("ops[{op_index}].patches[{j}]"), "empty patch")),
        }
    }
    Ok(())
}

fn add_keys(list: &mut Vec<String>, keys: &[String]) {
    for k in keys {
        if !list.contains(k) {
            list.push(k.clone());
        }
    }
}

fn invalid(path: String, message: impl Into<String>) -> StoreError {
    StoreError::Invalid(ValidationErrors(vec![ValidationError { path, message: message.into() }]))
}
