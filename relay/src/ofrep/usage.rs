//! Usage from OFREP: each evaluation's served variation (or a missing
//! flag) counted per environment and SDK key, and handed to the relay's
//! usage table every 10 s as a summary of instance `ofrep:<key id>` (one
//! instance per key and relay), so `flagctl flag usage` and `flag stale`
//! see OFREP traffic. A bulk answer counts every flag it carries (OFREP
//! cannot say which of them the client reads). Defaults are unknown here
//! (OFREP requests carry none). Bounded: at most 1,000 flag keys per
//! environment and key between two hand-overs (the bound of a summary);
//! evaluations of further keys are counted as untracked.

use std::collections::HashMap;
use std::sync::Mutex;

use flagstream_proto::v1 as pb;

/// Most distinct flag keys counted per environment and key between two
/// hand-overs (a summary's own bound).
const MAX_KEYS: usize = 1_000;

/// One flag's counts.
#[derive(Debug, Default)]
struct Counts {
    variations: Vec<u64>,
    missing: u64,
}

/// Counts of one environment and key since the last hand-over.
#[derive(Debug, Default)]
struct Pending {
    flags: HashMap<String, Counts>,
    untracked: u64,
}

/// OFREP's counts, by (environment, key id).
#[derive(Debug, Default)]
pub(crate) struct OfrepUsage {
    pending: Mutex<HashMap<(String, String), Pending>>,
}

impl OfrepUsage {
    /// Counts evaluations in `env` by key `key_id`: each `(flag, served
    /// variation or None for a missing flag)`.
    pub(crate) fn record<'a>(
        &self,
        env: &str,
        key_id: &str,
        evaluated: impl IntoIterator<Item = (&'a str, Option<u32>)>,
    ) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        let p = pending.entry((env.to_owned(), key_id.to_owned())).or_default();
        for (flag, variation) in evaluated {
            let full = p.flags.len() >= MAX_KEYS;
            let counts = match p.flags.get_mut(flag) {
                Some(c) => c,
                None if full => {
                    p.untracked += 1;
                    continue;
                }
                None => p.flags.entry(flag.to_owned()).or_default(),
            };
            match variation {
                Some(v) => {
                    let i = v as usize;
                    if counts.variations.len() <= i {
                        counts.variations.resize(i + 1, 0);
                    }
                    counts.variations[i] += 1;
                }
                None => counts.missing += 1,
            }
        }
    }

    /// Takes the counts since the last call: per (environment, key id), a
    /// summary covering `start..end`.
    pub(crate) fn take(
        &self,
        start_unix_ms: u64,
        end_unix_ms: u64,
    ) -> Vec<(String, String, pb::UsageSummary)> {
        let taken = std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        taken
            .into_iter()
            .map(|((env, key_id), p)| {
                let flags = p
                    .flags
                    .into_iter()
                    .map(|(key, c)| pb::FlagUsage {
                        key,
                        variations: c.variations,
                        fallback_missing: c.missing,
                        last_evaluated_unix_ms: end_unix_ms,
                        ..Default::default()
                    })
                    .collect();
                let s = pb::UsageSummary {
                    start_unix_ms,
                    end_unix_ms,
                    flags,
                    untracked_evaluations: p.untracked,
                };
                (env, key_id, s)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_variation_and_missing_bounded_by_keys() {
        let u = OfrepUsage::default();
        u.record("prod", "k1", [("a", Some(1)), ("a", Some(1)), ("a", Some(0)), ("gone", None)]);
        let many: Vec<String> = (0..1_100).map(|i| format!("f{i}")).collect();
        u.record("prod", "k2", many.iter().map(|k| (k.as_str(), Some(0))));
        let mut taken = u.take(1, 2);
        taken.sort_by(|a, b| a.1.cmp(&b.1));
        let (_, _, s1) = &taken[0];
        let a = s1.flags.iter().find(|f| f.key == "a").unwrap();
        assert_eq!(a.variations, vec![1, 2]);
        assert_eq!(s1.flags.iter().find(|f| f.key == "gone").unwrap().fallback_missing, 1);
        let (_, _, s2) = &taken[1];
        assert_eq!((s2.flags.len(), s2.untracked_evaluations), (1_000, 100));
        assert!(crate::usage::check(s2).is_ok(), "within a summary's bounds");
        assert!(u.take(2, 3).is_empty(), "taken once");
    }
}
