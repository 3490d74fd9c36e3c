//! The checks that walk chains across items: nested segments and
//! prerequisites, for cycles and for depth past the limits.

use super::report::Report;
use super::{HashMap, Links};
use crate::limit::Limits;
use crate::model::{Operator, Segment};

/// Rejects cycles among nested segments and nesting deeper than the limit
/// (a segment whose rules use no `segment_match` is 1 deep).
pub(super) fn segment_depths(r: &mut Report, segments: &[&Segment], limits: &Limits) {
    let by_key: HashMap<&str, &Segment> = segments.iter().map(|&s| (s.key.as_str(), s)).collect();
    let children = |s: &'_ Segment| -> Vec<String> {
        s.rules
            .iter()
            .flat_map(|rule| rule.clauses.iter())
            .filter(|c| c.op == Operator::SegmentMatch)
            .flat_map(|c| c.values.iter().filter_map(|v| v.as_str().map(str::to_owned)))
            .collect()
    };
    // `None` marks "in progress" to detect cycles.
    fn depth<'a>(
        key: &str,
        by_key: &HashMap<&'a str, &'a Segment>,
        children: &dyn Fn(&Segment) -> Vec<String>,
        memo: &mut HashMap<String, Option<usize>>,
        path: &mut Vec<String>,
    ) -> Result<usize, Vec<String>> {
        match memo.get(key) {
            Some(Some(d)) => return Ok(*d),
            Some(None) => {
                let start = path.iter().position(|k| k == key).unwrap_or(0);
                let mut cycle = path[start..].to_vec();
                cycle.push(key.to_owned());
                return Err(cycle);
            }
            None => {}
        }
        let Some(s) = by_key.get(key) else {
            return Ok(0); // unknown: reported by check_segment_refs
        };
        memo.insert(key.to_owned(), None);
        path.push(key.to_owned());
        let mut deepest = 0;
        for child in children(s) {
            deepest = deepest.max(depth(&child, by_key, children, memo, path)?);
        }
        path.pop();
        memo.insert(key.to_owned(), Some(deepest + 1));
        Ok(deepest + 1)
    }
    let mut memo = HashMap::default();
    let mut keys: Vec<&str> = by_key.keys().copied().collect();
    keys.sort_unstable();
    for key in keys {
        match depth(key, &by_key, &children, &mut memo, &mut Vec::new()) {
            Ok(d) if d > limits.max_segment_depth => r.err(
                format!("segments[{key:?}].rules"),
                format!("segments nested {d} deep, limit {}", limits.max_segment_depth),
            ),
            Ok(_) => {}
            Err(cycle) => {
                // Filed under the cycle's own first segment (not one that
                // merely leads into it).
                r.err(
                    format!("segments[{:?}].rules", cycle[0]),
                    format!("segment cycle: {}", cycle.join(" -> ")),
                );
                // One cycle, one error: everything the walk left in
                // progress (the cycle and the path into it) counts as done,
                // so a segment leading into it is not reported as a cycle.
                for d in memo.values_mut() {
                    if d.is_none() {
                        *d = Some(0);
                    }
                }
            }
        }
    }
}

/// Rejects prerequisite cycles and chains deeper than the limit.
pub(super) fn prerequisite_depths(r: &mut Report, flags: &HashMap<&str, Links<'_>>, limits: &Limits) {
    // Longest chain of prerequisite edges below each flag, memoised.
    // `None` marks "in progress" to detect cycles.
    fn depth<'a>(
        key: &'a str,
        flags: &HashMap<&'a str, Links<'a>>,
        memo: &mut HashMap<&'a str, Option<usize>>,
        cap: usize,
    ) -> Result<usize, Vec<&'a str>> {
        match memo.get(key) {
            Some(Some(d)) => return Ok(*d),
            Some(None) => return Err(vec![key]),
            None => {}
        }
        let Some(f) = flags.get(key) else {
            return Ok(0);
        };
        memo.insert(key, None);
        let mut deepest = 0;
        for (pkey, _) in f.prerequisites() {
            if pkey == key {
                continue; // reported as a self-reference already
            }
            match depth(pkey, flags, memo, cap) {
                Ok(d) => deepest = deepest.max(d + 1),
                Err(mut cycle) => {
                    cycle.push(key);
                    return Err(cycle);
                }
            }
            if deepest > cap {
                break; // deep enough to report; stop walking
            }
        }
        memo.insert(key, Some(deepest));
        Ok(deepest)
    }
    let mut memo = HashMap::default();
    // A flag without prerequisites is 0 deep and on no cycle: walked from
    // the flags that have some (sorted, so the report is deterministic).
    let mut keys: Vec<&str> = flags.iter().filter(|(_, f)| f.has_prerequisites()).map(|(&k, _)| k).collect();
    keys.sort_unstable();
    let mut reported_cycle = false;
    for key in keys {
        match depth(key, flags, &mut memo, limits.max_prerequisite_depth) {
            Ok(d) if d > limits.max_prerequisite_depth => r.err(
                format!("flags[{key:?}].prerequisites"),
                format!("prerequisite chain {d} deep, limit {}", limits.max_prerequisite_depth),
            ),
            Ok(_) => {}
            Err(cycle) if !reported_cycle => {
                reported_cycle = true;
                let mut names: Vec<&str> = cycle.into_iter().rev().collect();
                names.dedup();
                r.err(
                    format!("flags[{key:?}].prerequisites"),
                    format!("prerequisite cycle: {}", names.join(" -> ")),
                );
                // Mark everything on the cycle as done so one cycle is one error.
                for n in names {
                    memo.insert(n, Some(0));
                }
            }
            Err(_) => {}
        }
    }
}
