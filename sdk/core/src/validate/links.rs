//! What the checks that cross items read of a flag ([`Links`]: its key,
//! its number of variations, its prerequisites and the segments its rules
//! name): from the model of a flag being written, or from the [`Facts`] a
//! snapshot keeps of each flag it holds. A snapshot keeps no models (a
//! flag's model is decoded from its bytes when asked for) and need not keep
//! a compiled form (the relay compiles a flag when it first evaluates it),
//! so the flags a change leaves alone are judged by their facts.

use std::sync::Arc;

use crate::model::{Flag, FlagType, Operator};

/// What a snapshot knows of a flag without its model or its compiled form:
/// what the checks that cross items, listings and OFREP's visibility read.
/// A few dozen bytes for a flag without prerequisites or segment
/// references.
#[derive(Debug)]
pub(crate) struct Facts {
    pub(crate) version: u64,
    pub(crate) flag_type: FlagType,
    /// Shown to client-side SDKs (OFREP's public bulk evaluation).
    pub(crate) client_visible: bool,
    /// A rollout buckets the way an imported system does
    /// (`feature::IMPORTED_BUCKETING`).
    pub(crate) imported_bucketing: bool,
    pub(crate) variations: u32,
    /// `(key, variation)`, in order.
    pub(crate) prerequisites: Box<[(Arc<str>, u32)]>,
    pub(crate) segment_refs: Box<[SegmentRef]>,
}

impl Facts {
    pub(crate) fn of(flag: &Flag) -> Facts {
        Facts {
            version: flag.version,
            flag_type: flag.flag_type,
            client_visible: flag.client_visible,
            imported_bucketing: std::iter::once(&flag.fallthrough)
                .chain(flag.rules.iter().map(|r| &r.serve))
                .any(|s| s.rollout.as_ref().is_some_and(|r| r.bucketing.is_some())),
            variations: u32::try_from(flag.variations.len()).unwrap_or(u32::MAX),
            prerequisites: flag
                .prerequisites
                .iter()
                .map(|p| (Arc::from(p.key.as_str()), p.variation))
                .collect(),
            segment_refs: segment_refs(flag),
        }
    }
}

/// A segment named by one of a flag's `segment_match` clauses: where (rule,
/// clause of the rule, value of the clause) and which.
#[derive(Debug)]
pub(crate) struct SegmentRef {
    pub(crate) rule: u32,
    pub(crate) clause: u32,
    pub(crate) value: u32,
    pub(crate) key: Box<str>,
}

/// Every segment `flag`'s rules name, in rule, clause and value order (an
/// empty list allocates nothing).
fn segment_refs(flag: &Flag) -> Box<[SegmentRef]> {
    model_refs(flag)
        .map(|(rule, clause, value, key)| SegmentRef { rule, clause, value, key: key.into() })
        .collect()
}

/// [`segment_refs`] read from the model: `(rule, clause, value, key)`.
fn model_refs(flag: &Flag) -> impl Iterator<Item = (u32, u32, u32, &str)> {
    flag.rules.iter().enumerate().flat_map(|(ri, rule)| {
        let matches = rule.clauses.iter().enumerate().filter(|(_, c)| c.op == Operator::SegmentMatch);
        matches.flat_map(move |(ci, c)| {
            c.values
                .iter()
                .enumerate()
                .filter_map(move |(vi, v)| v.as_str().map(|k| (ri as u32, ci as u32, vi as u32, k)))
        })
    })
}

/// One flag as the cross-item checks see it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Links<'a> {
    /// A flag being written.
    Model(&'a Flag),
    /// A flag a snapshot holds, by its key and facts.
    Held { key: &'a str, facts: &'a Facts },
}

impl<'a> Links<'a> {
    pub(crate) fn key(self) -> &'a str {
        match self {
            Links::Model(f) => &f.key,
            Links::Held { key, .. } => key,
        }
    }

    /// How many variations the flag has (a prerequisite names one by
    /// position).
    pub(crate) fn variations(self) -> usize {
        match self {
            Links::Model(f) => f.variations.len(),
            Links::Held { facts, .. } => facts.variations as usize,
        }
    }

    pub(crate) fn has_prerequisites(self) -> bool {
        match self {
            Links::Model(f) => !f.prerequisites.is_empty(),
            Links::Held { facts, .. } => !facts.prerequisites.is_empty(),
        }
    }

    /// The flag's prerequisites, in order: `(key, variation)`.
    pub(crate) fn prerequisites(self) -> impl Iterator<Item = (&'a str, u32)> {
        match self {
            Links::Model(f) => Either::A(f.prerequisites.iter().map(|p| (p.key.as_str(), p.variation))),
            Links::Held { facts, .. } => Either::B(facts.prerequisites.iter().map(|(k, v)| (&**k, *v))),
        }
    }

    /// The segments the flag's rules name: `(rule, clause, value, key)`.
    pub(crate) fn segment_refs(self) -> impl Iterator<Item = (u32, u32, u32, &'a str)> {
        match self {
            Links::Model(f) => Either::A(model_refs(f)),
            Links::Held { facts, .. } => {
                Either::B(facts.segment_refs.iter().map(|r| (r.rule, r.clause, r.value, &*r.key)))
            }
        }
    }
}

/// One of two iterators of the same items.
enum Either<A, B> {
    A(A),
    B(B),
}

impl<T, A: Iterator<Item = T>, B: Iterator<Item = T>> Iterator for Either<A, B> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        match self {
            Either::A(a) => a.next(),
            Either::B(b) => b.next(),
        }
    }
}
