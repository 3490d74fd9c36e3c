//! What validation counts per item and per environment: the sums the
//! limits that cross items are checked against, kept with a snapshot so a
//! change can be judged by its own items.

/// What a flag that passed validation adds to its environment's totals:
/// its encoded size and the compiled bytes of its regular expressions
/// (`max_snapshot_bytes`, `max_regex_env_compiled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ItemCost {
    pub(crate) encoded_bytes: u32,
    pub(crate) regex_bytes: u32,
}

/// What a whole environment that passed validation adds up to, against
/// the limits that sum over its items (`max_flags`, `max_segments`,
/// `max_snapshot_bytes`, `max_regex_env_compiled`): kept with a snapshot so
/// a change can be judged by its own items (`validate::delta`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) flags: usize,
    pub(crate) segments: usize,
    /// Encoded bytes of every flag and segment.
    pub(crate) bytes: usize,
    /// Compiled regex bytes charged to every flag and segment.
    pub(crate) regex: usize,
    /// Flags with at least one prerequisite: while there are none, no
    /// flag can name a deleted one.
    pub(crate) linked: usize,
}

/// What a validation that passed found: the fresh flags' costs, in
/// order, and the whole environment's totals.
#[derive(Debug)]
pub(crate) struct Passed {
    pub(crate) costs: Vec<ItemCost>,
    pub(crate) totals: Totals,
}

impl ItemCost {
    pub(crate) fn new(encoded_bytes: usize, regex_bytes: usize) -> ItemCost {
        // Both are bounded far below 4 GiB by the per-item limits of a
        // valid flag; saturate rather than wrap for one that is not.
        let clamp = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        ItemCost { encoded_bytes: clamp(encoded_bytes), regex_bytes: clamp(regex_bytes) }
    }
}
