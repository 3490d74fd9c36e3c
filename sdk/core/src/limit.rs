//! Size and shape limits that validation enforces, on the relay at write time
//! and in the SDK on receive. Each bound keeps one bad or hostile write from
//! costing every subscriber memory or CPU (see the "payloads that outgrew
//! memory" incident); `docs/EVALUATION.md` lists them for operators.

/// Validation limits. `Limits::default()` holds the documented defaults; a
/// relay operator may change them, an SDK normally keeps the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Bytes in a flag or segment key.
    pub max_key_len: usize,
    /// Variations per flag.
    pub max_variations: usize,
    /// Rules per flag.
    pub max_rules: usize,
    /// Clauses per rule (flag or segment).
    pub max_clauses: usize,
    /// Values per clause.
    pub max_clause_values: usize,
    /// Bytes in an attribute name.
    pub max_attribute_len: usize,
    /// Bytes in one string value: a clause value, target key or string
    /// variation; also the JSON text of one JSON variation.
    pub max_value_len: usize,
    /// Bytes in one regex pattern.
    pub max_regex_len: usize,
    /// Bytes of compiled program one regex may use (`regex` size limit).
    pub max_regex_compiled: usize,
    /// `matches` patterns in one flag or segment (every value of every
    /// `matches` clause of its rules).
    pub max_regex_patterns: usize,
    /// Bytes of compiled regexes (their heap size as the regex engine
    /// reports it) in one flag or segment: each pattern compiles under what
    /// is left.
    pub max_regex_item_compiled: usize,
    /// Bytes of compiled regexes in one environment (every flag and
    /// segment), checked when a whole environment is validated.
    pub max_regex_env_compiled: usize,
    /// Bytes of lazy-DFA cache one regex may grow while matching, per
    /// thread that matches it (`regex` `dfa_size_limit`); past it the
    /// engine falls back to a slower search, never more memory.
    pub max_regex_dfa: usize,
    /// Context keys across all individual targets of one flag.
    pub max_target_values: usize,
    /// Keys in one segment (included + excluded).
    pub max_segment_keys: usize,
    /// Rules per segment.
    pub max_segment_rules: usize,
    /// Prerequisites per flag.
    pub max_prerequisites: usize,
    /// Prerequisite chain depth; a deeper chain is an error at evaluation too.
    pub max_prerequisite_depth: usize,
    /// Segment nesting depth (`segment_match` inside segment rules); a
    /// deeper nesting is an error at evaluation too.
    pub max_segment_depth: usize,
    /// Steps in one schedule.
    pub max_schedule_steps: usize,
    /// Protobuf-encoded bytes of one flag.
    pub max_flag_bytes: usize,
    /// Protobuf-encoded bytes of one segment. One item must fit in one
    /// stream message, and gRPC clients decode at most 4 MiB by default.
    pub max_segment_bytes: usize,
    /// Flags per environment.
    pub max_flags: usize,
    /// Segments per environment.
    pub max_segments: usize,
    /// Protobuf-encoded bytes of a whole environment snapshot.
    pub max_snapshot_bytes: usize,
}

/// Kinds in one context (the entries of a multi-kind context's
/// `contexts`), enforced where a context is read from outside the program
/// (the protobuf form of server-side evaluation, the file form): a
/// multi-kind context is read kind by kind, so this bounds the work one
/// request can ask for. Fixed, not a [`Limits`] field: contexts are read
/// before any relay setting applies, and every reader must agree.
pub const MAX_CONTEXT_KINDS: usize = 64;

/// Attributes of one kind of a context, enforced with
/// [`MAX_CONTEXT_KINDS`]. Attribute lookup is a scan of a kind's
/// attributes, so this bounds every lookup of an evaluation too.
pub const MAX_CONTEXT_ATTRIBUTES: usize = 256;

/// The problem with a context of `n` kinds, if over [`MAX_CONTEXT_KINDS`]
/// (the caller puts the path of the `contexts` field before it).
pub fn context_kinds_problem(n: usize) -> Option<String> {
    (n > MAX_CONTEXT_KINDS)
        .then(|| format!("{n} kinds, the limit is {MAX_CONTEXT_KINDS} (max-context-kinds)"))
}

/// The problem with a kind of `n` attributes, if over
/// [`MAX_CONTEXT_ATTRIBUTES`].
pub fn context_attributes_problem(n: usize) -> Option<String> {
    (n > MAX_CONTEXT_ATTRIBUTES)
        .then(|| format!("{n} attributes, the limit is {MAX_CONTEXT_ATTRIBUTES} (max-context-attributes)"))
}

/// Prerequisite depth the evaluator follows before reporting
/// `MALFORMED_FLAG`: a backstop for data that bypassed validation (cycles).
pub const MAX_PREREQUISITE_DEPTH: usize = 10;

/// Segment nesting depth the evaluator follows before reporting
/// `MALFORMED_FLAG`: a backstop for data that bypassed validation (cycles).
pub const MAX_SEGMENT_DEPTH: usize = 10;

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_key_len: 256,
            max_variations: 100,
            max_rules: 1_000,
            max_clauses: 50,
            max_clause_values: 10_000,
            max_attribute_len: 256,
            max_value_len: 64 * KIB,
            max_regex_len: 4 * KIB,
            max_regex_compiled: MIB,
            max_regex_patterns: 100,
            max_regex_item_compiled: 4 * MIB,
            max_regex_env_compiled: 64 * MIB,
            max_regex_dfa: 256 * KIB,
            max_target_values: 100_000,
            max_segment_keys: 100_000,
            max_segment_rules: 1_000,
            max_prerequisites: 10,
            max_prerequisite_depth: MAX_PREREQUISITE_DEPTH,
            max_segment_depth: MAX_SEGMENT_DEPTH,
            max_schedule_steps: 50,
            max_flag_bytes: MIB,
            max_segment_bytes: 3 * MIB,
            max_flags: 100_000,
            max_segments: 10_000,
            max_snapshot_bytes: 256 * MIB,
        }
    }
}
