//! What a replica (or a relay of a shared database) passes on: the sum of
//! what its SDKs reported since the last call, as summaries of its own
//! under the upstream's request limit.

use flagstream::usage::MAX_FLAGS_PER_SUMMARY;
use flagstream_proto::v1 as pb;
use prost::Message as _;

use super::{MAX_FORWARD_BYTES, SUMMARY_HEADER_BYTES, Usage, lock};
use crate::store::now_ms;

impl Usage {
    /// A replica's summaries for its upstream: what its SDKs reported for
    /// `env` since the last call (each at most `MAX_FLAGS_PER_SUMMARY`
    /// flags and [`MAX_FORWARD_BYTES`] encoded), with the SDK instances per
    /// flag of the last hour.
    pub(crate) fn forward(&self, env: &str) -> Vec<pb::UsageSummary> {
        let now = now_ms();
        let Some(cell) = self.env_cell(env) else { return Vec::new() };
        let mut e = lock(&cell);
        let out = std::mem::take(&mut e.outbox);
        if out.flags.is_empty() && out.untracked == 0 {
            return Vec::new();
        }
        let mut defaults = out.defaults;
        let entries: Vec<pb::FlagUsage> = out
            .flags
            .into_iter()
            .map(|(key, b)| {
                let instances = e.flags.get(&key).map_or(0, |st| st.own_sdks(now));
                pb::FlagUsage {
                    // No defaults listed for the key: none passed.
                    defaults: defaults.remove(&key).unwrap_or_default(),
                    key,
                    variations: b.variations,
                    fallback_missing: b.fallbacks[0],
                    fallback_wrong_type: b.fallbacks[1],
                    fallback_malformed: b.fallbacks[2],
                    fallback_not_ready: b.fallbacks[3],
                    other_defaults: b.other_defaults,
                    last_evaluated_unix_ms: now,
                    instances,
                }
            })
            .collect();
        let mut summaries: Vec<pb::UsageSummary> = Vec::new();
        let mut bytes = 0usize;
        for entry in entries {
            // The entry as a field of the summary: tag and length prefix
            // (at most 1 + 3 bytes for an entry under 2 MiB).
            let len = entry.encoded_len() + 4;
            let full = summaries.last().is_none_or(|s| {
                s.flags.len() >= MAX_FLAGS_PER_SUMMARY
                    || bytes + len > MAX_FORWARD_BYTES - SUMMARY_HEADER_BYTES
            });
            if full {
                summaries.push(pb::UsageSummary {
                    start_unix_ms: out.since_ms,
                    end_unix_ms: now,
                    flags: Vec::new(),
                    untracked_evaluations: 0,
                });
                bytes = 0;
            }
            bytes += len;
            if let Some(s) = summaries.last_mut() {
                s.flags.push(entry);
            }
        }
        match summaries.first_mut() {
            Some(s) => s.untracked_evaluations = out.untracked,
            None => summaries.push(pb::UsageSummary {
                start_unix_ms: out.since_ms,
                end_unix_ms: now,
                flags: Vec::new(),
                untracked_evaluations: out.untracked,
            }),
        }
        summaries
    }
}
