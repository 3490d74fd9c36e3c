//! What a client-side key's change stream follows: the flags visible to
//! clients and everything their results depend on (prerequisite flags and
//! segments, transitively), as one digest per environment revision. A
//! client stream sends an event only when this digest moves, and its event
//! ids are `<epoch>:c<digest>`, so a write to a flag no client can see
//! (and nothing a visible flag depends on) reaches no browser, not even as
//! a revision number that moved.
//!
//! The digest is over each item's key and stored checksum contribution (a
//! hash of its whole bytes, rules included), not its revision: a client
//! cannot rebuild it from guessed names and revisions to learn which
//! hidden flags exist. It is computed once per environment revision
//! (cached here, at most [`MAX_CACHED`] environments), however many
//! streams follow it.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use flagstream::Snapshot;
use flagstream::model::{Clause, Operator};
use sha2::{Digest, Sha256};

use crate::store::Env;
use crate::store::state::Kind;

/// Most environments whose digest is cached (the cache is emptied when
/// full: a recomputation is one pass over the snapshot).
const MAX_CACHED: usize = 1024;

/// An environment's client view at one (epoch, revision): its event id.
#[derive(Debug)]
struct Seen {
    epoch: String,
    revision: u64,
    id: Arc<str>,
}

/// Client view digests by environment.
#[derive(Debug, Default)]
pub(crate) struct Views {
    /// Environment name → its view at the revision last asked for.
    cache: Mutex<HashMap<String, Seen>>,
}

impl Views {
    /// The client view's event id of `env` at its head:
    /// `<epoch>:c<first 64 bits of the digest, hex>`.
    pub(crate) fn id(&self, env: &Env) -> Arc<str> {
        let state = env.state.load();
        let name = env.meta.load().name.clone();
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(seen) = cache.get(&name)
            && seen.epoch == state.epoch
            && seen.revision == state.revision
        {
            return seen.id.clone();
        }
        let hash_of = |kind: Kind, key: &str| state.items.get(&(kind, key.to_owned())).map(|i| i.hash);
        let id: Arc<str> = format!("{}:c{}", state.epoch, digest(&state.snapshot, hash_of)).into();
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(name, Seen { epoch: state.epoch.clone(), revision: state.revision, id: id.clone() });
        id
    }
}

/// Segment keys named by `clauses`.
fn segments_of(clauses: &[Clause]) -> impl Iterator<Item = &str> {
    clauses
        .iter()
        .filter(|c| c.op == Operator::SegmentMatch)
        .flat_map(|c| c.values.iter().filter_map(|v| v.as_str()))
}

/// The digest of the visible flags and their dependencies: each item's
/// kind, key and checksum contribution (`hash_of`), in key order (a
/// dependency that does not exist counts as such).
fn digest(snap: &Snapshot, hash_of: impl Fn(Kind, &str) -> Option<u64>) -> String {
    let mut flags: BTreeSet<&str> = BTreeSet::new();
    let mut segments: BTreeSet<&str> = BTreeSet::new();
    let mut todo: Vec<&str> =
        snap.keys().filter(|k| snap.info(k).is_some_and(|f| f.client_visible)).collect();
    let mut seg_todo: Vec<&str> = Vec::new();
    while let Some(key) = todo.pop() {
        if !flags.insert(key) {
            continue;
        }
        let Some((prerequisites, segments)) = snap.references(key) else { continue };
        todo.extend(prerequisites);
        seg_todo.extend(segments);
    }
    while let Some(key) = seg_todo.pop() {
        if !segments.insert(key) {
            continue;
        }
        let Some(s) = snap.segment(key) else { continue };
        for r in &s.rules {
            seg_todo.extend(segments_of(&r.clauses));
        }
    }
    let mut h = Sha256::new();
    let items =
        flags.into_iter().map(|k| (Kind::Flag, k)).chain(segments.into_iter().map(|k| (Kind::Segment, k)));
    for (kind, key) in items {
        let hash = hash_of(kind, key).map(|v| v.to_string());
        h.update(format!("{} {key} {}\n", kind as u8, hash.as_deref().unwrap_or("-")).as_bytes());
    }
    hex::encode(&h.finalize()[..8])
}

#[cfg(test)]
mod tests {
    use flagstream::{FlagSet, Limits};

    use super::*;

    /// The digest of `set`, each item's hash standing for its bytes by its
    /// revision.
    fn digest_of(set: &FlagSet) -> String {
        let snap = Snapshot::compile(set, &Limits::default()).unwrap();
        let hash_of = |kind: Kind, key: &str| match kind {
            Kind::Flag => snap.flag(key).map(|f| f.revision),
            Kind::Segment => snap.segment(key).map(|s| s.revision),
        };
        digest(&snap, hash_of)
    }

    #[test]
    fn the_digest_follows_visible_flags_and_their_dependencies_only() {
        let mut set: FlagSet = serde_yaml_ng::from_str(
            r#"
flags:
  - {key: shown, type: bool, variations: [true, false], on: true, off_variation: 1, client_visible: true,
     prerequisites: [{key: gate, variation: 0}],
     rules: [{id: r, clauses: [{attribute: key, op: segment_match, values: [beta]}], serve: {variation: 0}}],
     fallthrough: {variation: 1}}
  - {key: gate, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - {key: secret, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
segments:
  - {key: beta, included: [u1]}
  - {key: other, included: [u2]}
"#,
        )
        .unwrap();
        let before = digest_of(&set);
        set.flags[2].revision = 7; // a hidden flag nothing visible uses
        set.segments[1].revision = 7; // a segment nothing visible uses
        assert_eq!(digest_of(&set), before);
        set.flags[1].revision = 8; // the visible flag's prerequisite
        let after_prerequisite = digest_of(&set);
        assert_ne!(after_prerequisite, before);
        set.segments[0].revision = 9; // a segment the visible flag uses
        assert_ne!(digest_of(&set), after_prerequisite);
    }
}
