//! Write operations and their planning: checking expected versions, applying
//! puts, deletes and patches to the model, validating the would-be
//! environment, and encoding each changed item once. Pure: no I/O.

use std::collections::{BTreeMap, HashMap, HashSet};

use bytes::Bytes;
use flagstream::model::{KindKeys, Serve, Target};
use flagstream::{Flag, FlagSet, Limits, Segment, Snapshot, ValidationError, ValidationErrors, wire};
use flagstream_proto::v1 as pb;
use prost::Message;

use super::StoreError;
use super::backend::shared_encoding;
use super::state::{EnvState, ItemKey, Kind};

/// One requested change.
#[derive(Debug, Clone)]
pub(crate) enum Op {
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
pub(crate) struct ItemVersion {
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
pub(crate) struct WriteResult {
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
    /// The buffer `bytes` reads, for the embedded backend to store as it
    /// is ([`shared_encoding`]).
    pub(crate) shared: Option<sled::IVec>,
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

/// Plans `ops` against `state` for `revision`. A version conflict leaves
/// `changed_by` to the caller (it reads the audit log).
pub(crate) fn plan(
    state: &EnvState,
    ops: Vec<Op>,
    revision: u64,
    limits: &Limits,
) -> Result<Plan, StoreError> {
    let snap = &state.snapshot;
    let original = |key: &ItemKey| -> Option<Model> {
        match key.0 {
            Kind::Flag => snap.flag(&key.1).map(Model::Flag),
            Kind::Segment => snap.segment(&key.1).cloned().map(Model::Segment),
        }
    };
    // Touched items: key → (final model or None, named by which op index).
    let mut touched: BTreeMap<ItemKey, Option<Model>> = BTreeMap::new();
    let mut order: Vec<ItemKey> = Vec::new();
    // Which op named each item (PROTOCOL.md §7: at most one op per item).
    let mut named_by: HashMap<ItemKey, usize> = HashMap::new();
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
        let patch_or_delete = !matches!(op, Op::PutFlag { .. } | Op::PutSegment { .. });
        if patch_or_delete && expected == Some(0) {
            return Err(invalid(
                format!("ops[{i}].expected_version"),
                "0 means \"must not exist\", which a delete or patch cannot satisfy; omit it or give the version",
            ));
        }
        if let Some(first) = named_by.insert(key.clone(), i) {
            return Err(invalid(
                format!("ops[{i}]"),
                format!("{} {:?} is already named by ops[{first}]; one op per item", key.0.name(), key.1),
            ));
        }
        let current = original(&key);
        let current_version = state.items.get(&key).map_or(0, |it| it.version);
        if let Some(expected) = expected
            && (expected != current_version || (expected == 0) != current.is_none())
        {
            return Err(StoreError::Conflict {
                kind: key.0,
                key: key.1.clone(),
                expected,
                current: current_version,
                changed_by: None,
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
        order.push(key.clone());
        touched.insert(key, next);
    }

    let mut changes = Vec::new();
    let mut versions = Vec::new();
    let mut upserts = FlagSet::default();
    // The written flags' encodings, in `upserts.flags` order: the snapshot
    // keeps the very bytes the state does.
    let mut upsert_bytes = Vec::new();
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
        let (bytes, shared) = after
            .as_ref()
            .map(|m| {
                shared_encoding(&match m {
                    Model::Flag(f) => wire::flag_to_proto(f).encode_to_vec(),
                    Model::Segment(s) => wire::segment_to_proto(s).encode_to_vec(),
                })
            })
            .unzip();
        match after {
            Some(Model::Flag(f)) => {
                upserts.flags.push(f);
                upsert_bytes.extend(bytes.clone());
            }
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
        changes.push(Change { key, bytes, shared, version_before, version_after });
    }
    let snapshot = if changes.is_empty() {
        Snapshot::empty()
    } else {
        snap.apply_encoded(&upserts, &upsert_bytes, &deleted_flags, &deleted_segments, limits)
            .map_err(|e| name_ops(e, &named_by))?
    };
    Ok(Plan { changes, versions, snapshot })
}

/// Prefixes each validation error with the op it comes from (`ops[3]: ...`,
/// PROTOCOL.md §7): the op that wrote the item the error's path is in, or
/// else the op whose item the message names in quotes (e.g. a deleted
/// segment that another flag still references). Hash lookups only:
/// O(errors + ops), deterministic.
fn name_ops(errors: ValidationErrors, named_by: &HashMap<ItemKey, usize>) -> ValidationErrors {
    let by_path: HashMap<String, usize> = named_by
        .iter()
        .map(|(key, i)| {
            (format!("{}[{:?}]", if key.0 == Kind::Flag { "flags" } else { "segments" }, key.1), *i)
        })
        .collect();
    // A key named by two ops of different kinds: the lower op index.
    let mut by_key: HashMap<&str, usize> = HashMap::new();
    for (key, i) in named_by {
        by_key.entry(key.1.as_str()).and_modify(|j| *j = (*j).min(*i)).or_insert(*i);
    }
    let op_of = |e: &ValidationError| -> Option<usize> {
        let item = e.path.find(']').map(|end| &e.path[..=end]);
        item.and_then(|p| by_path.get(p).copied()).or_else(|| {
            // Quoted names in the message: `unknown segment "beta"`.
            e.message.split('"').skip(1).step_by(2).filter_map(|name| by_key.get(name).copied()).min()
        })
    };
    ValidationErrors(
        errors
            .0
            .into_iter()
            .map(|e| match op_of(&e) {
                Some(i) => ValidationError { path: format!("ops[{i}]: {}", e.path), message: e.message },
                None => e,
            })
            .collect(),
    )
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
        let path = format!("ops[{op_index}].patch_flag.ops[{j}]");
        match &p.op {
            None => return Err(invalid(path, "empty patch")),
            Some(P::SetOn(on)) => f.on = *on,
            Some(P::SetOffVariation(v)) => f.off_variation = *v,
            Some(P::SetFallthrough(s)) => f.fallthrough = wire::serve_from_proto(&path, Some(s))?,
            Some(P::AddTargets(t)) if t.keys.is_empty() => {}
            Some(P::AddTargets(t)) => add_targets(f, t.variation, &t.context_kind, &t.keys),
            Some(P::RemoveTargets(t)) => {
                let remove: HashSet<&str> = t.keys.iter().map(String::as_str).collect();
                for target in f
                    .targets
                    .iter_mut()
                    .filter(|x| x.variation == t.variation && x.context_kind == t.context_kind)
                {
                    target.values.retain(|k| !remove.contains(k.as_str()));
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

/// Targets `keys` of `kind` with `variation`: each key leaves any other
/// target of the flag for that kind first (admin.proto: one target per key
/// and kind), then joins the variation's target once. O(targets + keys),
/// whatever the sizes.
fn add_targets(f: &mut Flag, variation: u32, kind: &str, keys: &[String]) {
    let adding: HashSet<&str> = keys.iter().map(String::as_str).collect();
    let ours = |x: &Target| x.variation == variation && x.context_kind == kind;
    for other in f.targets.iter_mut().filter(|x| x.context_kind == kind && x.variation != variation) {
        other.values.retain(|k| !adding.contains(k.as_str()));
    }
    f.targets.retain(|x| !x.values.is_empty() || ours(x));
    match f.targets.iter_mut().find(|x| ours(x)) {
        Some(target) => add_keys(&mut target.values, keys),
        None => {
            let mut values = Vec::with_capacity(keys.len());
            add_keys(&mut values, keys);
            f.targets.push(Target { variation, values, context_kind: kind.to_owned() });
        }
    }
}

fn patch_segment(s: &mut Segment, patches: &[pb::SegmentPatch], op_index: usize) -> Result<(), StoreError> {
    use pb::segment_patch::Op as P;
    for (j, p) in patches.iter().enumerate() {
        let (add, k, included) = match &p.op {
            Some(P::AddIncluded(k)) => (true, k, true),
            Some(P::RemoveIncluded(k)) => (false, k, true),
            Some(P::AddExcluded(k)) => (true, k, false),
            Some(P::RemoveExcluded(k)) => (false, k, false),
            None => return Err(invalid(format!("ops[{op_index}].patch_segment.ops[{j}]"), "empty patch")),
        };
        if k.context_kind.is_empty() {
            let list = if included { &mut s.included } else { &mut s.excluded };
            if add {
                add_keys(list, &k.keys)
            } else {
                remove_keys(list, &k.keys)
            }
            continue;
        }
        let lists = if included { &mut s.included_contexts } else { &mut s.excluded_contexts };
        let at = match lists.iter().position(|l| l.context_kind == k.context_kind) {
            Some(at) => at,
            None if add => {
                lists.push(KindKeys { context_kind: k.context_kind.clone(), values: Vec::new() });
                lists.len() - 1
            }
            None => continue,
        };
        if add {
            add_keys(&mut lists[at].values, &k.keys)
        } else {
            remove_keys(&mut lists[at].values, &k.keys)
        }
        if lists[at].values.is_empty() {
            lists.remove(at);
        }
    }
    Ok(())
}

/// Appends the keys not yet in `list` (each once), in order: O(n + m).
fn add_keys(list: &mut Vec<String>, keys: &[String]) {
    let new: Vec<String> = {
        let mut present: HashSet<&str> = list.iter().map(String::as_str).collect();
        keys.iter().filter(|k| present.insert(k.as_str())).cloned().collect()
    };
    list.extend(new);
}

/// Removes every key of `keys` from `list`: O(n + m).
fn remove_keys(list: &mut Vec<String>, keys: &[String]) {
    let remove: HashSet<&str> = keys.iter().map(String::as_str).collect();
    list.retain(|k| !remove.contains(k.as_str()));
}

fn invalid(path: String, message: impl Into<String>) -> StoreError {
    StoreError::Invalid(ValidationErrors(vec![ValidationError { path, message: message.into() }]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::flag_patch::Op as P;
    use pb::segment_patch::Op as S;

    fn flag() -> Flag {
        let mut f = Flag {
            key: "f".into(),
            flag_type: flagstream::FlagType::String,
            variations: vec!["a".into(), "b".into(), "c".into()],
            on: true,
            off_variation: 0,
            targets: vec![],
            rules: vec![],
            fallthrough: Serve::variation(0),
            prerequisites: vec![],
            salt: String::new(),
            version: 1,
            revision: 1,
            description: String::new(),
            tags: vec![],
            owner: String::new(),
            client_visible: false,
        };
        f.targets = vec![
            Target { variation: 0, values: vec!["alice".into(), "bob".into()], context_kind: String::new() },
            Target { variation: 1, values: vec!["carol".into()], context_kind: String::new() },
        ];
        f
    }

    fn targets(keys: &[&str], variation: u32) -> pb::TargetKeys {
        pb::TargetKeys {
            variation,
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn add_targets_moves_a_key_out_of_the_other_targets() {
        let mut f = flag();
        // bob moves from variation 0 to 1; carol is already there (kept once);
        // dave is new.
        let patch = pb::FlagPatch { op: Some(P::AddTargets(targets(&["bob", "carol", "dave", "dave"], 1))) };
        patch_flag(&mut f, &[patch], 0).unwrap();
        assert_eq!(
            f.targets,
            vec![
                Target { variation: 0, values: vec!["alice".into()], context_kind: String::new() },
                Target {
                    variation: 1,
                    values: vec!["carol".into(), "bob".into(), "dave".into()],
                    context_kind: String::new()
                },
            ]
        );
        // Moving the last key out of a target removes that target; a new
        // variation gets a target of its own.
        let patch = pb::FlagPatch { op: Some(P::AddTargets(targets(&["alice"], 2))) };
        patch_flag(&mut f, &[patch], 0).unwrap();
        assert_eq!(f.targets.len(), 2, "{:?}", f.targets);
        assert_eq!(
            f.targets[1],
            Target { variation: 2, values: vec!["alice".into()], context_kind: String::new() }
        );
    }

    #[test]
    fn remove_targets_drops_keys_and_emptied_targets() {
        let mut f = flag();
        let patch = pb::FlagPatch { op: Some(P::RemoveTargets(targets(&["carol", "nobody"], 1))) };
        patch_flag(&mut f, &[patch], 0).unwrap();
        assert_eq!(
            f.targets,
            vec![Target {
                variation: 0,
                values: vec!["alice".into(), "bob".into()],
                context_kind: String::new()
            }]
        );
    }

    #[test]
    fn segment_patches_of_100k_keys_dedupe_and_remove() {
        let mut s = Segment {
            key: "s".into(),
            included: (0..100_000).map(|i| format!("k{i}")).collect(),
            excluded: vec![],
            rules: vec![],
            version: 1,
            revision: 1,
            description: String::new(),
            ..Segment::default()
        };
        let add: Vec<String> = (50_000..150_000).map(|i| format!("k{i}")).collect();
        let remove: Vec<String> = (0..100_000).step_by(2).map(|i| format!("k{i}")).collect();
        let patches = [
            pb::SegmentPatch {
                op: Some(S::AddIncluded(pb::ContextKeys { keys: add, ..Default::default() })),
            },
            pb::SegmentPatch {
                op: Some(S::RemoveIncluded(pb::ContextKeys { keys: remove, ..Default::default() })),
            },
        ];
        patch_segment(&mut s, &patches, 0).unwrap();
        // 150,000 distinct keys, less the 50,000 even ones below 100,000.
        assert_eq!(s.included.len(), 100_000);
        assert_eq!(s.included[0], "k1");
        assert_eq!(s.included.last().map(String::as_str), Some("k149999"));
    }
}
