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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use once_cell::race::OnceBox;

use crate::compile::{compile_flag, compile_raw, compile_segment, compile_segments};
use crate::compiled::{CompiledFlag, CompiledSegment, Constant, FastMap};
use crate::error::ValidationErrors;
use crate::limit::Limits;
use crate::model::{Flag, FlagSet, FlagType, Segment};
use crate::usage::FlagUsage;
use crate::validate::{self, ItemCost};
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

impl Head {
    fn of(f: &CompiledFlag) -> Head {
        Head { flag_type: f.flag_type, version: f.version, constant: f.constant.clone() }
    }
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
    /// What the flag adds to its environment's totals, kept so a change
    /// to the environment validates only what changed
    /// ([`Snapshot::apply`]); read from the compiled form on first need
    /// for a flag that was not validated here (one that arrived in wire
    /// form).
    cost: OnceLock<ItemCost>,
}

#[derive(Debug)]
enum Form {
    Compiled(CompiledFlag),
    Lazy { key: Arc<str>, raw: Bytes, limits: Arc<Limits>, compiled: OnceBox<CompiledFlag> },
}

impl FlagCell {
    fn compiled(flag: CompiledFlag, cost: Option<ItemCost>) -> FlagCell {
        FlagCell {
            usage: FlagUsage::default(),
            form: Form::Compiled(flag),
            cost: cost.map_or_else(OnceLock::new, OnceLock::from),
        }
    }

    /// The flag's [`ItemCost`]: as validation found it, else from the
    /// compiled form (compiling the flag if it is still in wire form, as
    /// the warm-up does anyway): its regex bytes as compiling charged
    /// them, its encoded size the wire bytes' (a model's, encoded to
    /// measure, for compiled data that was never validated).
    fn cost(&self) -> ItemCost {
        *self.cost.get_or_init(|| {
            let compiled = self.get();
            let encoded = match &self.form {
                Form::Lazy { raw, .. } => raw.len(),
                Form::Compiled(f) => prost::Message::encoded_len(&crate::wire::flag_to_proto(&f.source)),
            };
            ItemCost::new(encoded, compiled.regex_bytes)
        })
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

/// Adds `flags` to `index`, the first at position `first`; on a duplicate
/// key (unvalidated data) the first one wins.
fn index_flags(index: &mut FastMap<Arc<str>, Slot>, flags: &[Arc<FlagCell>], first: usize) {
    for (i, f) in flags.iter().enumerate() {
        let key = match &f.form {
            Form::Lazy { key, .. } => key.clone(),
            Form::Compiled(c) => Arc::from(c.source.key.as_str()),
        };
        index.entry(key).or_insert_with(|| Slot {
            index: (first + i) as u32,
            cell: f.clone(),
            head: f.get_now().map(Head::of),
        });
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
        let costs = validate::flag_set_costs(set, limits)?;
        Ok(Snapshot::compile_with(set.clone(), costs.into_iter().map(Some), limits))
    }

    /// [`Snapshot::compile`] taking the set by value: validated, then the
    /// model items move into the snapshot instead of being copied (a large
    /// set is not held twice while it compiles).
    pub fn compile_set(set: FlagSet, limits: &Limits) -> Result<Snapshot, ValidationErrors> {
        let costs = validate::flag_set_costs(&set, limits)?;
        Ok(Snapshot::compile_with(set, costs.into_iter().map(Some), limits))
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
        Snapshot::compile_with(set, std::iter::repeat(None), limits)
    }

    /// Compiles `set`, each flag with its cost where known (in order).
    fn compile_with(
        set: FlagSet,
        costs: impl Iterator<Item = Option<ItemCost>>,
        limits: &Limits,
    ) -> Snapshot {
        let segments = compile_segments(set.segments, limits);
        let mut flags: Vec<_> = set
            .flags
            .into_iter()
            .zip(costs)
            .map(|(f, cost)| Arc::new(FlagCell::compiled(compile_flag(f, limits), cost)))
            .collect();
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
                    cost: OnceLock::new(),
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
        index_flags(&mut index, &flags, 0);
        Snapshot::with_index(flags, index, segments, limits)
    }

    fn with_index(
        flags: Vec<Arc<FlagCell>>,
        index: FastMap<Arc<str>, Slot>,
        segments: FastMap<Box<str>, Arc<CompiledSegment>>,
        limits: &Limits,
    ) -> Snapshot {
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
    /// whole, with the errors a whole-set validation gives, and on error
    /// nothing is returned; but only the changed flags are checked on their
    /// own: an unchanged flag counts through its kept `ItemCost` and in
    /// the rules that cross items (`validate::change`), so the cost of a
    /// change grows with the change, plus a light walk of the rest.
    pub fn apply(
        &self,
        change: &FlagSet,
        deleted_flags: &[String],
        deleted_segments: &[String],
        limits: &Limits,
    ) -> Result<Snapshot, ValidationErrors> {
        // Asked of every flag and segment: not std's SipHash.
        type Keys<'k> = HashSet<&'k str, foldhash::fast::RandomState>;
        let drop_flag: Keys = deleted_flags
            .iter()
            .map(String::as_str)
            .chain(change.flags.iter().map(|f| f.key.as_str()))
            .collect();
        let drop_segment: Keys = deleted_segments
            .iter()
            .map(String::as_str)
            .chain(change.segments.iter().map(|s| s.key.as_str()))
            .collect();
        // Validate the would-be state: the changed flags on their own, the
        // kept ones through what they add to the totals, every flag in the
        // checks that cross items (prerequisites, segment references).
        // By reference: cloning every item to validate would double a large
        // environment's memory on every write. One pass finds the kept
        // flags and where each flag of this snapshot moves in the next
        // one's (its position among the kept).
        let mut kept_cells: Vec<&Arc<FlagCell>> = Vec::with_capacity(self.flags.len());
        let mut position: Vec<u32> = Vec::with_capacity(self.flags.len());
        for f in &self.flags {
            position.push(kept_cells.len() as u32);
            if !drop_flag.contains(f.key()) {
                kept_cells.push(f);
            }
        }
        let kept: Vec<(&Flag, ItemCost)> = kept_cells.iter().map(|&f| (&*f.get().source, f.cost())).collect();
        let fresh: Vec<&Flag> = change.flags.iter().collect();
        let next_segments: Vec<&Segment> = self
            .segments()
            .filter(|s| !drop_segment.contains(s.key.as_str()))
            .chain(&change.segments)
            .collect();
        let costs = validate::change(&kept, &fresh, &next_segments, limits)?;

        let mut segments = self.segments.clone();
        segments.retain(|k, _| !drop_segment.contains(k.as_ref()));
        for s in &change.segments {
            segments.insert(Box::from(s.key.as_str()), Arc::new(compile_segment(s.clone(), limits)));
        }
        let mut flags: Vec<Arc<FlagCell>> = Vec::with_capacity(kept_cells.len() + change.flags.len());
        flags.extend(kept_cells.into_iter().cloned());
        let kept = flags.len();
        flags.extend(
            change
                .flags
                .iter()
                .zip(costs)
                .map(|(f, cost)| Arc::new(FlagCell::compiled(compile_flag(f.clone(), limits), Some(cost)))),
        );
        // The key index is this one's with the changed and deleted keys
        // taken out, the kept flags' positions moved up past the dropped
        // ones, and the changed flags added: no key of a flag that did not
        // change is copied or inserted again (rebuilding the index was most
        // of what a change cost a large environment after validation). A
        // slot made while its flag was still in wire form gets the flag's
        // head now that it is compiled, as a rebuilt index would.
        let mut index = self.index.clone();
        for key in &drop_flag {
            index.remove(*key);
        }
        for slot in index.values_mut() {
            slot.index = position[slot.index as usize];
            if slot.head.is_none() {
                slot.head = slot.cell.get_now().map(Head::of);
            }
        }
        index_flags(&mut index, &flags[kept..], kept);
        Ok(Snapshot::with_index(flags, index, segments, limits).with_cursor(&self.epoch, self.revision))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

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

    const CROSSING: &str = r#"
flags:
  - {key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}
  - {key: b, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0},
     prerequisites: [{key: a, variation: 1}]}
  - key: c
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules: [{id: in-s, clauses: [{attribute: key, op: segment_match, values: [s]}], serve: {variation: 0}}]
    fallthrough: {variation: 1}
  - key: d
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules: [{id: mail, clauses: [{attribute: email, op: matches, values: ['^[a-z]+@example\.com$']}], serve: {variation: 0}}]
    fallthrough: {variation: 1}
segments:
  - {key: s, included: [u1]}
"#;

    /// What `apply` must answer: the whole would-be set validated, the kept
    /// items first, in the order `apply` lists them.
    fn whole(
        base: &Snapshot,
        change: &FlagSet,
        deleted: (&[&str], &[&str]),
        limits: &Limits,
    ) -> Result<(), ValidationErrors> {
        let gone_flags: HashSet<&str> =
            change.flags.iter().map(|f| f.key.as_str()).chain(deleted.0.iter().copied()).collect();
        let gone_segments: HashSet<&str> =
            change.segments.iter().map(|s| s.key.as_str()).chain(deleted.1.iter().copied()).collect();
        let flags: Vec<&Flag> =
            base.flags().filter(|f| !gone_flags.contains(f.key.as_str())).chain(&change.flags).collect();
        let segments: Vec<&Segment> = base
            .segments()
            .filter(|s| !gone_segments.contains(s.key.as_str()))
            .chain(&change.segments)
            .collect();
        validate::items(&flags, &segments, limits)
    }

    #[test]
    fn a_change_is_judged_exactly_like_the_whole_would_be_set() {
        let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
        let one = |yaml: &str| -> Flag { serde_yaml_ng::from_str(yaml).unwrap() };
        let regex_flag = |key: &str| {
            let mut f = set.flags[3].clone();
            f.key = key.into();
            f
        };
        // Budgets that the set fits with a little room: a change that
        // needs more must be refused with the same figures as a whole-set
        // validation gives (what the kept flags used counts).
        let mut limits = Limits::default();
        let costs = validated_costs(&set, &limits);
        let used = costs["d"].regex_bytes as usize;
        let bytes: usize = costs.values().map(|c| c.encoded_bytes as usize).sum();
        limits.max_regex_env_compiled = used + 16;
        limits.max_flags = 5;
        limits.max_prerequisite_depth = 1;
        limits.max_snapshot_bytes =
            bytes + 100 + crate::wire::segment_to_proto(&set.segments[0]).encoded_len();
        let on = |key: &str, on: bool| {
            let mut f = set.flags.iter().find(|f| f.key == key).unwrap().clone();
            f.on = on;
            f
        };
        let flags = |fs: Vec<Flag>| FlagSet { flags: fs, segments: Vec::new() };
        let renamed = |mut f: Flag, key: &str| {
            f.key = key.into();
            f
        };
        let described = |mut f: Flag| {
            f.description = "x".repeat(200);
            f
        };
        let cases: Vec<(&str, FlagSet, &[&str], &[&str])> = vec![
            ("a toggle", flags(vec![on("a", false)]), &[], &[]),
            ("a prerequisite deleted", flags(vec![]), &["a"], &[]),
            (
                "a prerequisite's variation gone",
                flags(vec![one(
                    "{key: a, type: bool, variations: [true], on: true, off_variation: 0, fallthrough: {variation: 0}}",
                )]),
                &[],
                &[],
            ),
            ("a referenced segment deleted", flags(vec![]), &[], &["s"]),
            (
                "a prerequisite cycle through a kept flag",
                flags(vec![one(
                    "{key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: b, variation: 0}]}",
                )]),
                &[],
                &[],
            ),
            ("a key twice", flags(vec![renamed(on("a", true), "e"), renamed(on("a", false), "e")]), &[], &[]),
            ("the environment's regex budget", flags(vec![regex_flag("d2")]), &[], &[]),
            ("a regex flag replaced", flags(vec![regex_flag("d")]), &[], &[]),
            ("the snapshot's bytes", flags(vec![described(renamed(on("a", true), "big"))]), &[], &[]),
            (
                "a flag its own prerequisite",
                flags(vec![one("{key: a, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: a, variation: 0}]}")]),
                &[],
                &[],
            ),
            (
                "a chain too deep",
                flags(vec![one("{key: e, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}, prerequisites: [{key: b, variation: 0}]}")]),
                &[],
                &[],
            ),
            (
                // Segments take from the regex budget before flags: the kept
                // flag's regex no longer fits.
                "a segment's regex ahead of a kept flag's",
                FlagSet {
                    flags: Vec::new(),
                    segments: vec![serde_yaml_ng::from_str(
                        r"{key: s2, rules: [{clauses: [{attribute: email, op: matches, values: ['^[a-z]+@example\.com$']}]}]}",
                    )
                    .unwrap()],
                },
                &[],
                &[],
            ),
        ];
        let encoded = Snapshot::from_encoded(encoded(&set), set.segments.clone(), &limits).unwrap();
        for base in [Snapshot::compile(&set, &limits).unwrap(), encoded] {
            for (what, change, del_flags, del_segments) in &cases {
                let want = whole(&base, change, (del_flags, del_segments), &limits);
                let owned = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
                let got = base.apply(change, &owned(del_flags), &owned(del_segments), &limits).map(drop);
                assert_eq!(got, want, "{what}");
            }
        }
        // The cases refuse for the reasons they name, not for one another's.
        let base = Snapshot::compile(&set, &limits).unwrap();
        let refused = |i: usize| {
            let (_, change, f, s) = &cases[i];
            let owned = |keys: &[&str]| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>();
            base.apply(change, &owned(f), &owned(s), &limits).map(drop).unwrap_err().to_string()
        };
        assert!(base.apply(&cases[0].1, &[], &[], &limits).is_ok());
        assert!(base.apply(&cases[7].1, &[], &[], &limits).is_ok(), "the replaced flag's budget is freed");
        for (i, want) in [
            (1, r#"flags["b"].prerequisites[0].key: unknown flag "a""#),
            (2, r#"flags["b"].prerequisites[0].variation: index 1 out of range"#),
            (3, r#"flags["c"].rules[0].clauses[0].values[0]: unknown segment "s""#),
            (4, "prerequisite cycle"),
            (5, r#"flags["e"]: duplicate flag key"#),
            (5, "flags: 6 flags, limit 5"),
            (6, "over the environment's regex budget"),
            (8, "encoded bytes, limit"),
            (9, r#"flags["a"].prerequisites[0].key: a flag cannot be its own prerequisite"#),
            (10, "prerequisite chain 2 deep, limit 1"),
            (11, r#"flags["d"]: compiled regexes over the environment's regex budget"#),
        ] {
            let got = refused(i);
            assert!(got.contains(want), "{}: {got}", cases[i].0);
        }
    }

    /// Each flag's cost as validating `set` whole finds it, by key.
    fn validated_costs(set: &FlagSet, limits: &Limits) -> HashMap<String, ItemCost> {
        let snap = Snapshot::compile(set, limits).unwrap();
        snap.flags.iter().map(|c| (c.key().to_owned(), *c.cost.get().expect("validated"))).collect()
    }

    #[test]
    fn a_flag_costs_the_same_validated_or_read_from_its_compiled_form() {
        let set: FlagSet = serde_yaml_ng::from_str(CROSSING).unwrap();
        let limits = Limits::default();
        let validated = validated_costs(&set, &limits);
        assert!(validated["d"].regex_bytes > 0, "the regex is counted");
        // Never validated here: the cost comes from the compiled form (and
        // the wire bytes), as for a client started from its cache.
        let lazy = Snapshot::from_encoded(encoded(&set), set.segments.clone(), &limits).unwrap();
        let unvalidated = Snapshot::compile_unvalidated(&set, &limits);
        for snap in [&lazy, &unvalidated] {
            for cell in &snap.flags {
                assert!(cell.cost.get().is_none());
                assert_eq!(cell.cost(), validated[cell.key()], "{}", cell.key());
            }
        }
        // Patterns in several rules, charged in the same order either way.
        let mut many = set.flags[3].clone();
        many.key = "many".into();
        let mut rule = many.rules[0].clone();
        rule.id = "more".into();
        rule.clauses[0].values = vec!["^a+$".into(), "^(b|c)[0-9]{2,5}$".into()];
        many.rules.push(rule);
        let set = FlagSet { flags: vec![many], segments: Vec::new() };
        let validated = validated_costs(&set, &limits)["many"];
        let lazy = Snapshot::from_encoded(encoded(&set), Vec::new(), &limits).unwrap();
        assert_eq!(lazy.flags[0].cost(), validated);
        // A field this build does not know (a newer relay's): the wire
        // bytes count whole, more than validation would measure after
        // decoding; on the safe side of `max_snapshot_bytes`.
        let mut raw = encoded(&set)[0].to_vec();
        raw.extend_from_slice(b"\x98\x06\x01"); // field 99, varint 1
        let newer = Snapshot::from_encoded([Bytes::from(raw)], Vec::new(), &limits).unwrap();
        let cost = newer.flags[0].cost();
        assert_eq!(
            (cost.encoded_bytes, cost.regex_bytes),
            (validated.encoded_bytes + 3, validated.regex_bytes)
        );
    }

    #[test]
    fn changes_find_every_flag_where_a_fresh_compile_does() {
        let flag = |i: usize, on: bool| -> Flag {
            serde_yaml_ng::from_str(&format!(
                "{{key: f{i}, type: string, variations: [v{i}, off], on: {on}, off_variation: 1, fallthrough: {{variation: 0}}}}"
            ))
            .unwrap()
        };
        let limits = Limits::default();
        let start = FlagSet { flags: (0..20).map(|i| flag(i, true)).collect(), segments: Vec::new() };
        // Compiled, and as a client started from its cache holds it (wire
        // form, compiled by the warm-up: its slots made without a head).
        let cached = Snapshot::from_encoded(encoded(&start), Vec::new(), &limits).unwrap();
        assert!(cached.index.values().all(|s| s.head.is_none()));
        cached.warm_up();
        for mut snap in [Snapshot::compile(&start, &limits).unwrap(), cached] {
            changes_find_every_flag(&mut snap, start.clone(), &limits, &flag);
        }
    }

    /// Deletes, changes and adds, twice over, each step against a fresh
    /// compile of the same flags: the index moved, not rebuilt, must find
    /// the same flag under every key, with every slot's head as a rebuilt
    /// index would have it.
    fn changes_find_every_flag(
        snap: &mut Snapshot,
        mut set: FlagSet,
        limits: &Limits,
        flag: &dyn Fn(usize, bool) -> Flag,
    ) {
        let limits = limits.clone();
        let steps: [(&[usize], &[usize], &[usize]); 2] =
            [(&[3, 7], &[5, 12], &[20, 21]), (&[0, 19, 20], &[21, 6], &[3])];
        for (deleted, changed, added) in steps {
            let change = FlagSet {
                flags: changed
                    .iter()
                    .map(|&i| flag(i, false))
                    .chain(added.iter().map(|&i| flag(i, true)))
                    .collect(),
                segments: Vec::new(),
            };
            let gone: Vec<String> = deleted.iter().map(|i| format!("f{i}")).collect();
            *snap = snap.apply(&change, &gone, &[], &limits).unwrap();
            assert!(snap.index.values().all(|s| s.head.is_some()), "every flag is compiled: a head each");
            set.flags.retain(|f| !gone.contains(&f.key) && !change.flags.iter().any(|c| c.key == f.key));
            set.flags.extend(change.flags.iter().cloned());
            let fresh = Snapshot::compile(&set, &limits).unwrap();
            assert_eq!(snap.len(), fresh.len());
            let ctx = Context::new("u");
            for i in 0..22 {
                let key = format!("f{i}");
                assert_eq!(snap.flag(&key), fresh.flag(&key), "{key}");
                assert_eq!(snap.detail(&key, &ctx, "?"), fresh.detail(&key, &ctx, "?"), "{key}");
            }
        }
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
