//! The evaluation form of flags and segments: what compiling produces
//! (`compile.rs`) and what evaluation reads (`eval.rs`). Serves are
//! thresholds, targets are grouped by kind and hashed, every rule's
//! clauses sit in one array, variations are typed. Plain data: laid out
//! for few cache misses on a random flag (see `CompiledFlag`).

use std::collections::HashMap;
use std::sync::Arc;

use arrayvec::ArrayVec;

use crate::clause::{CompiledClause, StrSet};
use crate::model::{FlagType, Segment};
use crate::reference::{Attr, KindSel};
use crate::schedule::CompiledSchedule;
use crate::value::Value;

/// A hash map with the fast (non-DoS-resistant) hasher: keys come from
/// validated flag data, not from callers.
pub(crate) type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

/// What a rule or the fallthrough serves, ready to evaluate.
#[derive(Debug)]
pub(crate) enum CompiledServe {
    Variation(u32),
    /// Boxed, like the schedule: a serve is 16 bytes, so rules stay small
    /// and a flag's fixed parts fit in fewer cache lines.
    Rollout(Box<CompiledRollout>),
    Schedule(Box<CompiledSchedule>),
}

/// A percentage rollout ready to bucket.
#[derive(Debug)]
pub(crate) struct CompiledRollout {
    pub(crate) kind: KindSel,
    pub(crate) bucket_by: Attr,
    /// How the bucket is computed (flagstream's seed, or an imported
    /// system's bucketing).
    pub(crate) mode: crate::bucket::Mode,
    /// `(exclusive end of the bucket range, variation)` in listed order.
    pub(crate) thresholds: Box<[(u32, u32)]>,
}

/// The individual targets of one context kind: key → (position of the
/// target in the flag, its variation). The first target in listed order
/// that lists a kind's key wins, across kinds.
#[derive(Debug)]
pub(crate) struct TargetGroup {
    pub(crate) kind: KindSel,
    pub(crate) keys: FastMap<Box<str>, (u32, u32)>,
}

/// A rule: its clauses are `CompiledFlag::clauses[clauses.0..clauses.1]`
/// (every rule's clauses in one array: one allocation to walk, not one per
/// rule). The id is shared so an owned evaluation result can carry it
/// without allocating.
#[derive(Debug)]
pub(crate) struct CompiledRule {
    pub(crate) clauses: (u32, u32),
    pub(crate) serve: CompiledServe,
    pub(crate) id: Arc<str>,
}

/// The answer of a flag that does not depend on the context: off, or on with
/// no prerequisites, targets or rules and a fixed fallthrough. Most flags in a
/// mature environment are like this (kill switches, finished rollouts).
#[derive(Debug, Clone)]
pub(crate) struct Constant {
    pub(crate) variation: u32,
    /// `true`: reason OFF; `false`: reason FALLTHROUGH.
    pub(crate) off: bool,
    pub(crate) value: Value,
}

/// A flag's variations: the usual two inline in the compiled flag (no
/// pointer to follow to read the served value), more on the heap.
#[derive(Debug)]
pub(crate) enum Variations {
    Inline(ArrayVec<Value, 2>),
    Heap(Box<[Value]>),
}

impl Variations {
    pub(crate) fn new(values: Vec<Value>) -> Variations {
        if values.len() <= 2 {
            Variations::Inline(values.into_iter().collect())
        } else {
            Variations::Heap(values.into_boxed_slice())
        }
    }

    #[inline(always)]
    pub(crate) fn get(&self, i: usize) -> Option<&Value> {
        match self {
            Variations::Inline(v) => v.get(i),
            Variations::Heap(v) => v.get(i),
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Variations::Inline(v) => v.len(),
            Variations::Heap(v) => v.len(),
        }
    }
}

/// A flag in evaluation form.
#[derive(Debug)]
// `repr(C)`: the fields evaluation reads come first, together, so a flag
// read on a cold cache costs as few cache lines as it can; what only
// handles, listeners and exports read comes last.
#[repr(C)]
pub(crate) struct CompiledFlag {
    /// Set when compiling unvalidated data failed: evaluation answers
    /// `MALFORMED_FLAG` instead of guessing.
    pub(crate) malformed: bool,
    pub(crate) on: bool,
    pub(crate) flag_type: FlagType,
    pub(crate) off_variation: u32,
    pub(crate) version: u64,
    pub(crate) rules: Box<[CompiledRule]>,
    /// The clauses of all rules, rule after rule.
    pub(crate) clauses: Box<[CompiledClause]>,
    pub(crate) prerequisites: Box<[(Arc<str>, u32)]>,
    /// Per context kind, key → the first target listing it; `None` when
    /// the flag has no targets, so the common case skips hashing the key.
    pub(crate) targets: Option<Box<[TargetGroup]>>,
    pub(crate) fallthrough: CompiledServe,
    pub(crate) variations: Variations,
    /// See [`Constant`]; `None` when evaluation needs the context.
    pub(crate) constant: Option<Constant>,
    /// Compiled bytes of the flag's regular expressions, in full: what
    /// validation charges it against the environment's regex budget (the
    /// same patterns in the same order under the same per-item budget), kept for
    /// `Snapshot::apply`.
    pub(crate) regex_bytes: usize,
}

/// A segment in evaluation form.
#[derive(Debug)]
pub(crate) struct CompiledSegment {
    /// Keys of the default kind in / out.
    pub(crate) included: StrSet,
    pub(crate) excluded: StrSet,
    /// Keys of named kinds in / out.
    pub(crate) included_kinds: Box<[(KindSel, StrSet)]>,
    pub(crate) excluded_kinds: Box<[(KindSel, StrSet)]>,
    pub(crate) rules: Box<[CompiledSegmentRule]>,
    /// Set when compiling unvalidated data failed: any evaluation that
    /// consults the segment answers `MALFORMED_FLAG`.
    pub(crate) malformed: bool,
    pub(crate) source: Arc<Segment>,
}

/// A segment rule in evaluation form.
#[derive(Debug)]
pub(crate) struct CompiledSegmentRule {
    pub(crate) clauses: Box<[CompiledClause]>,
    /// The share of matching contexts in the segment: `(weight, kind,
    /// attribute, bucketing)`.
    pub(crate) weight: Option<(u32, KindSel, Attr, crate::bucket::Mode)>,
}
