//! Judging a change by its own items: a change of flags to an environment
//! that passed validation as a whole under the same limits, validated in
//! time that grows with the change, not with the environment.
//!
//! [`delta`] only ever says "passes" or "cannot tell": it accepts a change
//! only when it can show, from the change, the previous versions of the
//! flags it replaces and the environment's [`Totals`], that a whole-set
//! validation (`validate::change`) of the result would pass. Everything
//! else, and every change with a problem, goes to the whole-set
//! validation, so a refusal reads exactly as it always did and no verdict
//! depends on which path judged it.
//!
//! Why the facts checked here suffice, given the environment before came
//! out of a validation under the same limits (its cross-item rules held,
//! its totals those the whole-set validation sums): each fresh flag passes the per-item checks; the sums are the
//! previous totals with the replaced items' costs swapped for the fresh
//! ones'; a fresh flag's prerequisites and segment references resolve in
//! the result. A replaced flag keeps at least its variation count (so every
//! prerequisite naming a variation of it stays in range) and exactly its
//! prerequisite keys (so no edge among existing flags changes: no existing
//! flag's depth moves and no cycle can pass through one). A new flag has no
//! flag of the environment naming it, so cycles and depth can only arise
//! below new flags, which are walked. A deleted flag can only break the
//! flags naming it as a prerequisite, so deletions pass here only when no
//! flag of the result has a prerequisite at all (`Totals::linked`, moved
//! like the sums); segments reference segments, never flags.

use super::cost::{ItemCost, Passed, Totals};
use super::links::Links;
use crate::limit::Limits;
use crate::model::Flag;

/// Maps of the change's keys: foldhash, as the whole-set validation's.
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;

/// How many flags the depth walk below new flags may visit before it
/// leaves the question to the whole-set validation.
const WALK_BUDGET: usize = 4096;

/// What the judgement reads of the environment before the change.
pub(super) struct Env<'e, 'a> {
    /// Its totals; it passed validation under the limits given.
    pub(super) prior: &'e Totals,
    /// An existing flag's links and cost by key.
    pub(super) old: &'e dyn Fn(&str) -> Option<(Links<'a>, ItemCost)>,
    /// Whether a segment exists.
    pub(super) has_segment: &'e dyn Fn(&str) -> bool,
    /// A flag's own validation: its cost, or `None` for any problem.
    pub(super) check: &'e dyn Fn(&Flag) -> Option<ItemCost>,
}

/// The verdict on `fresh` (flags added or replaced) and `deleted` (flags
/// taken out; no segment changes) for `env`: `Some` when the result
/// certainly passes (the fresh flags' costs, in order, and the new
/// totals), `None` when the whole-set validation must decide.
pub(super) fn judge<'a>(
    env: &Env<'_, 'a>,
    fresh: &[&'a Flag],
    deleted: &[String],
    limits: &Limits,
) -> Option<Passed> {
    let old = env.old;
    let by_key: HashMap<&str, Links<'a>> = fresh.iter().map(|&f| (f.key.as_str(), Links::Model(f))).collect();
    if by_key.len() < fresh.len() {
        return None; // a key twice: the whole-set validation names it
    }
    let mut totals = *env.prior;
    let gone: HashMap<&str, ()> = deleted.iter().map(|k| (k.as_str(), ())).collect();
    for &key in gone.keys() {
        if by_key.contains_key(key) {
            return None; // deleted and written in one change
        }
        let (was, was_cost) = old(key)?;
        totals.flags = totals.flags.checked_sub(1)?;
        totals.bytes = totals.bytes.checked_sub(was_cost.encoded_bytes as usize)?;
        totals.regex = totals.regex.checked_sub(was_cost.regex_bytes as usize)?;
        if was.has_prerequisites() {
            totals.linked = totals.linked.checked_sub(1)?;
        }
    }
    let mut costs = Vec::with_capacity(fresh.len());
    let mut new_with_prerequisites = Vec::new();
    for &f in fresh {
        let cost = (env.check)(f)?;
        match old(&f.key) {
            Some((was, was_cost)) => {
                if f.variations.len() < was.variations() || !same_keys(was, Links::Model(f)) {
                    return None;
                }
                totals.bytes = totals.bytes.checked_sub(was_cost.encoded_bytes as usize)?;
                totals.regex = totals.regex.checked_sub(was_cost.regex_bytes as usize)?;
            }
            None => {
                totals.flags += 1;
                if !f.prerequisites.is_empty() {
                    totals.linked += 1;
                    new_with_prerequisites.push(f.key.as_str());
                }
            }
        }
        totals.bytes += cost.encoded_bytes as usize;
        totals.regex += cost.regex_bytes as usize;
        costs.push(cost);
        for p in &f.prerequisites {
            let variations = match by_key.get(p.key.as_str()) {
                Some(pre) => pre.variations(),
                None if gone.contains_key(p.key.as_str()) => return None,
                None => old(&p.key)?.0.variations(),
            };
            if p.key == f.key || p.variation as usize >= variations {
                return None;
            }
        }
        if Links::Model(f).segment_refs().any(|(_, _, _, k)| !(env.has_segment)(k)) {
            return None;
        }
    }
    if !gone.is_empty() && totals.linked > 0 {
        return None; // a flag left may name a deleted one
    }
    if totals.flags > limits.max_flags
        || totals.bytes > limits.max_snapshot_bytes
        || totals.regex > limits.max_regex_env_compiled
    {
        return None;
    }
    let mut walk = Walk { fresh: &by_key, old, memo: HashMap::default(), budget: WALK_BUDGET };
    for key in new_with_prerequisites {
        if walk.depth(key)? > limits.max_prerequisite_depth {
            return None;
        }
    }
    Some(Passed { costs, totals })
}

/// Both flags' prerequisites name the same flags in the same order.
fn same_keys(a: Links<'_>, b: Links<'_>) -> bool {
    a.prerequisites().map(|(k, _)| k).eq(b.prerequisites().map(|(k, _)| k))
}

/// The prerequisite depth below new flags, through the fresh flags and the
/// existing ones; `None` on a cycle or when the walk's budget runs out.
struct Walk<'w, 'a> {
    fresh: &'w HashMap<&'a str, Links<'a>>,
    old: &'w dyn Fn(&str) -> Option<(Links<'a>, ItemCost)>,
    /// `None`: in progress (met again: a cycle).
    memo: HashMap<&'a str, Option<usize>>,
    budget: usize,
}

impl<'a> Walk<'_, 'a> {
    fn depth(&mut self, key: &str) -> Option<usize> {
        if let Some(&known) = self.memo.get(key) {
            return known;
        }
        self.budget = self.budget.checked_sub(1)?;
        let f = match self.fresh.get(key) {
            Some(&f) => f,
            None => (self.old)(key)?.0,
        };
        self.memo.insert(f.key(), None);
        let mut deepest = 0;
        for (pkey, _) in f.prerequisites() {
            deepest = deepest.max(self.depth(pkey)? + 1);
        }
        self.memo.insert(f.key(), Some(deepest));
        Some(deepest)
    }
}
