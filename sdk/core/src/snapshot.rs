//! Immutable, compiled flag sets: what the SDK swaps into its `ArcSwap` and
//! what the relay evaluates with.
//!
//! Compiling turns each model flag into the form evaluation wants (variations
//! typed, targets hashed, clauses pre-parsed, rollout thresholds summed) once
//! per change, so the hot path only reads. Flags and segments are held behind
//! `Arc`s, so applying a delta recompiles only what changed and shares the
//! rest with the previous snapshot. Prerequisites and `segment_match` refer to
//! other items by key and are resolved at evaluation time, which keeps one
//! flag's compiled form independent of all others.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use once_cell::race::OnceBox;

use crate::compile::{compile_flag, compile_raw, compile_segment, compile_segments};
use crate::compiled::{CompiledFlag, CompiledSegment, Constant, FastMap};
use crate::error::ValidationErrors;
use crate::limit::Limits;
use crate::model::{Flag, FlagSet, FlagType, Segment};
use crate::usage::FlagUsage;
use crate::validate;
use crate::wire;

/// Source of [`Snapshot::generation`]: every snapshot built in this process
/// gets a distinct number, so a [`crate::FlagHandle`] can tell whether its
/// cached index still belongs to the snapshot it is handed.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// What the key index holds per flag: its position, and for a flag compiled
/// when the index was built, enough to answer a constant flag from the index
/// entry alone without touching the compiled flag (one cache miss fewer on a
/// random lookup).
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    pub(crate) index: u32,
    /// `Snapshot::flags[index]`, held here too: a lookup by key reaches the
    /// flag without a read of the flags array (one cache miss fewer).
    pub(crate) cell: Arc<FlagCell>,
    /// `None` for a flag that was still in wire form (see [`FlagCell`]).
    pub(crate) head: Option<Head>,
}

/// The context-independent facts of a compiled flag.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) flag_type: FlagType,
    pub(crate) version: u64,
    pub(crate) constant: Option<Constant>,
}

/// One flag of a snapshot: compiled, or still in its wire form and compiled
/// on first use.
///
/// The lazy form exists for cold starts from the cache: decoding, converting
/// and compiling 10,000 flags takes tens of milliseconds, so a client built
/// from its cache indexes the raw bytes (checksum-verified), serves at once,
/// and compiles each flag the first time something reads it, while a
/// background warm-up compiles the rest. First use is lock-free: racing
/// readers may both compile, one result is kept ([`OnceBox`]).
///
/// The cell also holds the flag's usage counters ([`FlagUsage`]): a cell is
/// shared by every snapshot in which the flag did not change, so the counts
/// follow it across revisions.
#[derive(Debug)]
pub(crate) struct FlagCell {
    pub(crate) usage: FlagUsage,
    form: Form,
}

#[derive(Debug)]
enum Form {
    Compiled(CompiledFlag),
    Lazy { key: Arc<str>, raw: Bytes, limits: Arc<Limits>, compiled: OnceBox<CompiledFlag> },
}

impl FlagCell {
    fn compiled(flag: CompiledFlag) -> FlagCell {
        FlagCell { usage: FlagUsage::default(), form: Form::Compiled(flag) }
    }

    /// The compiled flag, compiling it now if it is still in wire form.
    #[inline]
    pub(crate) fn get(&self) -> &CompiledFlag {
        match &self.form {
            Form::Compiled(f) => f,
            Form::Lazy { key, raw, limits, compiled } => {
                compiled.get_or_init(|| Box::new(compile_raw(key, raw, limits)))
            }
        }
    }

    /// The compiled flag if it is compiled already.
    fn get_now(&self) -> Option<&CompiledFlag> {
        match &self.form {
            Form::Compiled(f) => Some(f),
            Form::Lazy { compiled, .. } => compiled.get(),
        }
    }

    /// The flag key, without compiling.
    pub(crate) fn key(&self) -> &str {
        match &self.form {
            Form::Compiled(f) => &f.source.key,
            Form::Lazy { key, .. } => key,
        }
    }
}

/// An immutable, compiled set of flags and segments at one revision.
#[derive(Debug)]
pub struct Snapshot {
    pub(crate) flags: Vec<Arc<FlagCell>>,
    pub(crate) index: FastMap<Arc<str>, Slot>,
    pub(crate) segments: FastMap<Box<str>, Arc<CompiledSegment>>,
    pub(crate) max_depth: usize,
    pub(crate) max_segment_depth: usize,
    epoch: Box<str>,
    revision: u64,
    generation: u64,
}

impl Snapshot {
    /// Validates `set` and compiles it. Nothing is compiled if anything is
    /// invalid; every problem is reported with its path.
    pub fn compile(set: &FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        validate::flag_set(set, limits)?;
        Ok(Snapshot::compile_unvalidated(set, limits))
    }

    /// [`Snapshot::compile`] taking the set by value: validated, then the
    /// model items move into the snapshot instead of being copied (a large
    /// set is not held twice while it compiles).
    pub fn compile_set(set: FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        validate::flag_set(&set, limits)?;
        Ok(Snapshot::compile_owned(set, limits))
    }

    /// Compiles without validating. Flags that cannot be compiled are kept
    /// and evaluate to `MALFORMED_FLAG`; nothing panics. For data already
    /// validated elsewhere, and for tests of the evaluator's own guards.
    pub fn compile_unvalidated(set: &FlagSet, limits: &Limits) -> Snapshot {
        Snapshot::compile_owned(set.clone(), limits)
    }

    /// [`Snapshot::compile_unvalidated`] taking the set by value, so the
    /// model items move into the snapshot instead of being copied.
    pub fn compile_owned(set: FlagSet, limits: &Limits) -> Snapshot {
        let segments = compile_segments(set.segments, limits);
        let mut flags: Vec<_> =
            set.flags.into_iter().map(|f| Arc::new(FlagCell::compiled(compile_flag(f, limits)))).collect();
        // Collected in place, the pointers would keep the models' buffer
        // (50,000 flags: 22 MiB held for 400 KiB of pointers).
        flags.shrink_to_fit();
        Snapshot::assemble(flags, segments, limits)
    }

    /// A snapshot of protobuf-encoded flags (`flagstream.v1.Flag`, as the
    /// stream and the cache carry them), each decoded and compiled the first
    /// time it is evaluated, and model segments (compiled now). Only the
    /// flag keys are read here, which makes this several times faster than
    /// [`Snapshot::compile`] for a large set. Nothing is validated: for data
    /// validated when it was stored. A flag whose bytes do not decode
    /// evaluates to `MALFORMED_FLAG`; an error here means a flag's key could
    /// not be read.
    pub fn from_encoded(
        flags: impl IntoIterator<Item = Bytes>,
        segments: Vec<Segment>,
        limits: &Limits,
    ) -> Result<Snapshot, prost::DecodeError> {
        let flags = flags
            .into_iter()
            .map(|raw| Ok((Arc::from(wire::flag_key(&raw)?), raw)))
            .collect::<Result<_, prost::DecodeError>>()?;
        Ok(Snapshot::lazy(flags, segments, limits))
    }

    /// A snapshot of flags still in wire form (`(key, protobuf bytes)`,
    /// the key already read, e.g. with [`crate::wire::flag_key`]), each
    /// compiled on first use, and compiled segments. Not validated: for data
    /// that was validated when received and verified by checksum since (the
    /// SDK's cache). See [`Snapshot::from_encoded`] and [`Snapshot::warm_up`].
    pub fn lazy(flags: Vec<(Arc<str>, Bytes)>, segments: Vec<Segment>, limits: &Limits) -> Snapshot {
        let shared = Arc::new(limits.clone());
        let flags = flags
            .into_iter()
            .map(|(key, raw)| {
                Arc::new(FlagCell {
                    usage: FlagUsage::default(),
                    form: Form::Lazy { key, raw, limits: shared.clone(), compiled: OnceBox::new() },
                })
            })
            .collect();
        Snapshot::assemble(flags, compile_segments(segments, limits), limits)
    }

    /// Compiles every flag still in wire form; returns how many it compiled.
    /// Run off the evaluation path after a lazy build, so evaluations after
    /// it never compile (or allocate).
    pub fn warm_up(&self) -> usize {
        let mut compiled = 0;
        for f in self.flags.iter().filter(|f| f.get_now().is_none()) {
            f.get();
            compiled += 1;
        }
        compiled
    }

    /// An empty snapshot: every evaluation answers `FLAG_NOT_FOUND`.
    pub fn empty() -> Snapshot {
        Snapshot::assemble(Vec::new(), FastMap::default(), &Limits::default())
    }

    fn assemble(
        flags: Vec<Arc<FlagCell>>,
        segments: FastMap<Box<str>, Arc<CompiledSegment>>,
        limits: &Limits,
    ) -> Snapshot {
        let mut index = FastMap::with_capacity_and_hasher(flags.len(), Default::default());
        for (i, f) in flags.iter().enumerate() {
            // On a duplicate key (unvalidated data) the first one wins.
            let key = match &f.form {
                Form::Lazy { key, .. } => key.clone(),
                Form::Compiled(c) => Arc::from(c.source.key.as_str()),
            };
            index.entry(key).or_insert_with(|| Slot {
                index: i as u32,
                cell: f.clone(),
                head: f.get_now().map(|f| Head {
                    flag_type: f.flag_type,
                    version: f.version,
                    constant: f.constant.clone(),
                }),
            });
        }
        Snapshot {
            flags,
            index,
            segments,
            max_depth: limits.max_prerequisite_depth,
            max_segment_depth: limits.max_segment_depth,
            epoch: Box::from(""),
            revision: 0,
            generation: GENERATION.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// Returns this snapshot labelled with a stream cursor.
    pub fn with_cursor(mut self, epoch: &str, revision: u64) -> Snapshot {
        self.epoch = epoch.into();
        self.revision = revision;
        self
    }

    /// The store epoch this snapshot came from (empty if none).
    pub fn epoch(&self) -> &str {
        &self.epoch
    }

    /// The environment revision this snapshot is at.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// A process-unique id of this snapshot value.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Number of flags.
    pub fn len(&self) -> usize {
        self.flags.len()
    }

    /// True when there are no flags.
    pub fn is_empty(&self) -> bool {
        self.flags.is_empty()
    }

    /// A flag's model form.
    pub fn flag(&self, key: &str) -> Option<&Flag> {
        self.index.get(key).map(|slot| &*self.flags[slot.index as usize].get().source)
    }

    /// A segment's model form.
    pub fn segment(&self, key: &str) -> Option<&Segment> {
        self.segments.get(key).map(|s| &*s.source)
    }

    /// All flags in model form, in no particular order.
    pub fn flags(&self) -> impl Iterator<Item = &Flag> {
        self.flags.iter().map(|f| &*f.get().source)
    }

    /// All segments in model form, in no particular order.
    pub fn segments(&self) -> impl Iterator<Item = &Segment> {
        self.segments.values().map(|s| &*s.source)
    }

    /// The whole set in model form, sorted by key.
    pub fn to_flag_set(&self) -> FlagSet {
        let mut set =
            FlagSet { flags: self.flags().cloned().collect(), segments: self.segments().cloned().collect() };
        set.flags.sort_by(|a, b| a.key.cmp(&b.key));
        set.segments.sort_by(|a, b| a.key.cmp(&b.key));
        set
    }

    /// A new snapshot with the flags and segments of `change` replacing or
    /// adding to this one's, and the deleted keys removed. Only changed items
    /// are compiled; unchanged ones are shared. The result is validated as a
    /// whole, and on error nothing is returned.
    pub fn apply(
        &self,
        change: &FlagSet,
        deleted_flags: &[String],
        deleted_segments: &[String],
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        let drop_flag: HashSet<&str> = deleted_flags
            .iter()
            .map(String::as_str)
            .chain(change.flags.iter().map(|f| f.key.as_str()))
            .collect();
        let drop_segment: HashSet<&str> = deleted_segments
            .iter()
            .map(String::as_str)
            .chain(change.segments.iter().map(|s| s.key.as_str()))
            .collect();
        // Validate the would-be state as a whole (prerequisites and segment
        // references cross items).
        // By reference: cloning every item to validate would double a large
        // environment's memory on every write.
        let next_flags: Vec<&Flag> =
            self.flags().filter(|f| !drop_flag.contains(f.key.as_str())).chain(&change.flags).collect();
        let next_segments: Vec<&Segment> = self
            .segments()
            .filter(|s| !drop_segment.contains(s.key.as_str()))
            .chain(&change.segments)
            .collect();
        validate::items(&next_flags, &next_segments, limits)?;

        let mut segments = self.segments.clone();
        segments.retain(|k, _| !drop_segment.contains(k.as_ref()));
        for s in &change.segments {
            segments.insert(Box::from(s.key.as_str()), Arc::new(compile_segment(s.clone(), limits)));
        }
        let mut flags: Vec<Arc<FlagCell>> =
            self.flags.iter().filter(|f| !drop_flag.contains(f.key())).cloned().collect();
        flags.extend(
            change.flags.iter().map(|f| Arc::new(FlagCell::compiled(compile_flag(f.clone(), limits)))),
        );
        Ok(Snapshot::assemble(flags, segments, limits).with_cursor(&self.epoch, self.revision))
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::error::ErrorKind;
    use crate::{Context, Reason};

    fn encoded(set: &FlagSet) -> Vec<Bytes> {
        set.flags.iter().map(|f| Bytes::from(crate::wire::flag_to_proto(f).encode_to_vec())).collect()
    }

    const SET: &str = r#"
flags:
  - {key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - key: b
    type: string
    variations: [x, y]
    on: true
    off_variation: 0
    prerequisites: [{key: a, variation: 0}]
    rules: [{id: us, clauses: [{attribute: country, op: in, values: [US]}], serve: {variation: 1}}]
    fallthrough: {variation: 0}
"#;

    #[test]
    fn encoded_flags_compile_on_first_use_and_answer_like_compiled_ones() {
        let set: FlagSet = serde_yaml_ng::from_str(SET).unwrap();
        let limits = Limits::default();
        let eager = Snapshot::compile(&set, &limits).unwrap();
        let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &limits).unwrap();
        assert!(lazy.flags.iter().all(|f| f.get_now().is_none()), "nothing compiled up front");
        let us = Context::new("u").with("country", "US");
        assert_eq!(lazy.string("b", &us, "?"), "y");
        assert_eq!(lazy.detail("b", &us, "?"), eager.detail("b", &us, "?"));
        assert_eq!(lazy.detail("a", &us, false), eager.detail("a", &us, false));
        assert_eq!(lazy.detail::<i64>("a", &us, 7).reason, Reason::Error(ErrorKind::WrongType));
        assert_eq!(lazy.warm_up(), 0, "both flags were compiled by their first evaluation");
        assert_eq!(lazy.to_flag_set(), eager.to_flag_set());
    }

    #[test]
    fn warm_up_compiles_what_nothing_evaluated() {
        let set: FlagSet = serde_yaml_ng::from_str(SET).unwrap();
        let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &Limits::default()).unwrap();
        assert_eq!(lazy.warm_up(), 2);
        assert!(lazy.flags.iter().all(|f| f.get_now().is_some()));
        // A delta on a lazy snapshot keeps the unchanged flags and their answers.
        let mut change = set.clone();
        change.flags.retain(|f| f.key == "a");
        change.flags[0].on = false;
        let next = lazy.apply(&change, &[], &[], &Limits::default()).unwrap();
        assert!(!next.bool("a", &Context::new("u"), true));
        assert_eq!(next.string("b", &Context::new("u"), "?"), "x", "prerequisite a now fails: off variation");
    }

    #[test]
    fn undecodable_flag_bytes_evaluate_to_malformed_not_a_guess() {
        // Field 1 (key) is fine; field 2 claims 100 bytes that are not there.
        let raw = Bytes::from_static(b"\x0a\x01k\x12\x64oops");
        let lazy = Snapshot::from_encoded([raw], Vec::new(), &Limits::default()).unwrap();
        let d = lazy.detail("k", &Context::new("u"), true);
        assert_eq!((d.value, d.reason), (true, Reason::Error(ErrorKind::MalformedFlag)));
        assert!(
            Snapshot::from_encoded([Bytes::from_static(b"\x0a\x09k")], Vec::new(), &Limits::default())
                .is_err()
        );
    }
}
