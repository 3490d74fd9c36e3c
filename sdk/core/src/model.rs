//! The flag data model in its plain, editable form: flags, segments, rules,
//! clauses and rollouts as operators write them in YAML/JSON and as the relay
//! stores them. Semantics of every field: `docs/EVALUATION.md`.
//!
//! This module only describes data. Checking it is [`crate::validate`]'s job,
//! turning it into the fast evaluation form is [`crate::snapshot`]'s, and the
//! protobuf mapping lives in [`crate::wire`].

use serde::{Deserialize, Serialize};
use serde_json::Value as Json;

/// Rollout weights are in units of 1/100000: all weights of one rollout sum
/// to this.
pub const WEIGHT_TOTAL: u32 = 100_000;

/// The value type shared by every variation of one flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlagType {
    /// `true` / `false`.
    Bool,
    /// A UTF-8 string.
    String,
    /// A signed 64-bit integer.
    Int,
    /// A finite 64-bit float.
    Float,
    /// Any JSON value.
    Json,
}

impl FlagType {
    /// The lower-case name used in files and error messages.
    pub fn name(self) -> &'static str {
        match self {
            FlagType::Bool => "bool",
            FlagType::String => "string",
            FlagType::Int => "int",
            FlagType::Float => "float",
            FlagType::Json => "json",
        }
    }
}

/// A feature flag.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Flag {
    /// Unique key within the environment.
    pub key: String,
    /// Type of every variation.
    #[serde(rename = "type")]
    pub flag_type: FlagType,
    /// The values this flag can serve; rules refer to them by index.
    pub variations: Vec<Json>,
    /// Targeting on? When off, `off_variation` is served.
    pub on: bool,
    /// Served when the flag is off or a prerequisite fails. Required, so a
    /// flag's "safe" value is a decision written down, not an accident.
    pub off_variation: u32,
    /// Individual targets, checked before rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<Target>,
    /// Rules, checked in order; the first match wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
    /// Served when no target or rule matched.
    pub fallthrough: Serve,
    /// Flags that must return a given variation before this one is targeted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prerequisites: Vec<Prerequisite>,
    /// Bucketing salt; empty means the key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub salt: String,
    /// Bumped by the relay on every change (optimistic concurrency).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    /// Environment revision that last changed this flag (set by the relay).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u64,
    /// Free text for humans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    /// Free-form labels for filtering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Owning team or person.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// Answered over OFREP to client-side keys (browsers, apps); a flag
    /// without it is invisible to them. Not used by evaluation.
    #[serde(default, skip_serializing_if = "is_false")]
    pub client_visible: bool,
}

impl Flag {
    /// The salt used for bucketing: `salt`, or the key when it is empty.
    pub fn effective_salt(&self) -> &str {
        if self.salt.is_empty() { &self.key } else { &self.salt }
    }

    /// A flag with only its key set, standing in for one whose data could not
    /// be read (it evaluates to `MALFORMED_FLAG`).
    pub(crate) fn placeholder(key: &str) -> Flag {
        Flag {
            key: key.to_owned(),
            flag_type: FlagType::Bool,
            variations: Vec::new(),
            on: false,
            off_variation: 0,
            targets: Vec::new(),
            rules: Vec::new(),
            fallthrough: Serve::default(),
            prerequisites: Vec::new(),
            salt: String::new(),
            version: 0,
            revision: 0,
            description: String::new(),
            tags: Vec::new(),
            owner: String::new(),
            client_visible: false,
        }
    }
}

/// [`Bucketing`] as files spell it: a map with exactly one mode.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketingDoc {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    launchdarkly: Option<LaunchDarklyDoc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    unleash: Option<UnleashDoc>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct LaunchDarklyDoc {
    prefix: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct UnleashDoc {
    group: String,
    #[serde(default)]
    seed: u32,
    modulus: u32,
}

impl TryFrom<BucketingDoc> for Bucketing {
    type Error = String;

    fn try_from(d: BucketingDoc) -> Result<Bucketing, String> {
        match (d.launchdarkly, d.unleash) {
            (Some(l), None) => Ok(Bucketing::Launchdarkly { prefix: l.prefix }),
            (None, Some(u)) => Ok(Bucketing::Unleash { group: u.group, seed: u.seed, modulus: u.modulus }),
            _ => Err("bucketing: set exactly one of launchdarkly and unleash".into()),
        }
    }
}

impl From<Bucketing> for BucketingDoc {
    fn from(b: Bucketing) -> BucketingDoc {
        match b {
            Bucketing::Launchdarkly { prefix } => {
                BucketingDoc { launchdarkly: Some(LaunchDarklyDoc { prefix }), unleash: None }
            }
            Bucketing::Unleash { group, seed, modulus } => {
                BucketingDoc { launchdarkly: None, unleash: Some(UnleashDoc { group, seed, modulus }) }
            }
        }
    }
}

/// Individual targeting: these context keys get this variation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    /// Index into the flag's variations.
    pub variation: u32,
    /// Context keys, matched exactly.
    pub values: Vec<String>,
    /// The context kind whose key is matched; empty: the default kind
    /// (a single-kind context's own kind, a multi-kind context's `user`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_kind: String,
}

/// A targeting rule: every clause must match.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Optional stable id, unique within the flag, reported in `RULE_MATCH`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Clauses joined by AND.
    pub clauses: Vec<Clause>,
    /// What the rule serves when it matches.
    pub serve: Serve,
}

/// One test of one context attribute.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Clause {
    /// The context kind whose attribute is read; empty: the default kind
    /// (a single-kind context's own kind, a multi-kind context's `user`).
    /// Ignored for the `kind` attribute, which tests every kind the
    /// context has.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_kind: String,
    /// Attribute name, or a reference into nested values starting with
    /// `/` (`/address/city`; `~1` stands for `/` and `~0` for `~` in a
    /// name); `key` and `kind` name the context's key and kind.
    #[serde(default)]
    pub attribute: String,
    /// The comparison.
    pub op: Operator,
    /// Values to compare against (strings, numbers or bools); any may match.
    pub values: Vec<Json>,
    /// Invert the result. A missing attribute still never matches.
    #[serde(default, skip_serializing_if = "is_false")]
    pub negate: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Clause operators; `docs/EVALUATION.md` defines each one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Operator {
    In,
    StartsWith,
    EndsWith,
    Contains,
    Matches,
    Lt,
    Lte,
    Gt,
    Gte,
    Eq,
    SemverEq,
    SemverLt,
    SemverGt,
    Before,
    After,
    SegmentMatch,
}

impl Operator {
    /// Every operator, in protobuf enum order.
    pub const ALL: [Operator; 16] = [
        Operator::In,
        Operator::StartsWith,
        Operator::EndsWith,
        Operator::Contains,
        Operator::Matches,
        Operator::Lt,
        Operator::Lte,
        Operator::Gt,
        Operator::Gte,
        Operator::Eq,
        Operator::SemverEq,
        Operator::SemverLt,
        Operator::SemverGt,
        Operator::Before,
        Operator::After,
        Operator::SegmentMatch,
    ];

    /// The snake_case name used in files and error messages.
    pub fn name(self) -> &'static str {
        match self {
            Operator::In => "in",
            Operator::StartsWith => "starts_with",
            Operator::EndsWith => "ends_with",
            Operator::Contains => "contains",
            Operator::Matches => "matches",
            Operator::Lt => "lt",
            Operator::Lte => "lte",
            Operator::Gt => "gt",
            Operator::Gte => "gte",
            Operator::Eq => "eq",
            Operator::SemverEq => "semver_eq",
            Operator::SemverLt => "semver_lt",
            Operator::SemverGt => "semver_gt",
            Operator::Before => "before",
            Operator::After => "after",
            Operator::SegmentMatch => "segment_match",
        }
    }
}

/// What a rule or the fallthrough serves: exactly one of the three fields.
///
/// A struct rather than an enum so that YAML and JSON read
/// `{variation: 0}` / `{rollout: {...}}` / `{schedule: {...}}` in every
/// serde format alike.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serve {
    /// One fixed variation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variation: Option<u32>,
    /// A percentage rollout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// A progressive rollout whose steps take effect at their start times,
    /// by each evaluator's own clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<Box<Schedule>>,
}

impl Serve {
    /// Serve one fixed variation.
    pub fn variation(index: u32) -> Serve {
        Serve { variation: Some(index), ..Serve::default() }
    }

    /// Serve a rollout.
    pub fn rollout(rollout: Rollout) -> Serve {
        Serve { rollout: Some(rollout), ..Serve::default() }
    }

    /// Serve a schedule.
    pub fn schedule(schedule: Schedule) -> Serve {
        Serve { schedule: Some(Box::new(schedule)), ..Serve::default() }
    }
}

/// A progressive rollout of one variation: at each step's start the share
/// of contexts that get `variation` becomes the step's weight; everyone
/// else gets `otherwise`. Weights never decrease from step to step, so a
/// context that got the variation keeps it at every later step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Schedule {
    /// The variation being rolled out (index into the flag's variations).
    pub variation: u32,
    /// What everyone outside the current share gets, and everyone before
    /// the first step starts.
    pub otherwise: u32,
    /// Attribute (or reference) hashed to choose the bucket; empty: `key`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket_by: String,
    /// The context kind bucketed; empty: the default kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_kind: String,
    /// Hash seed; when absent it derives from the flag's salt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The steps, by strictly increasing start.
    pub steps: Vec<Step>,
}

/// One step of a [`Schedule`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// When it takes effect: Unix milliseconds. Files also take an RFC
    /// 3339 time (`2026-12-01T10:00:00Z`) and write one.
    #[serde(rename = "start", with = "instant")]
    pub start_unix_ms: i64,
    /// Share getting the schedule's variation, in units of 1/100000.
    pub weight: u32,
}

/// `Step::start` in files: an RFC 3339 string or Unix milliseconds in,
/// RFC 3339 (UTC, milliseconds) out.
mod instant {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub(super) fn serialize<S: Serializer>(ms: &i64, s: S) -> Result<S::Ok, S::Error> {
        use chrono::Datelike;
        // RFC 3339 has four-digit years: other instants stay milliseconds,
        // so whatever was read can be written back and read again.
        match chrono::DateTime::from_timestamp_millis(*ms) {
            Some(t) if (0..=9999).contains(&t.year()) => {
                s.serialize_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
            }
            _ => s.serialize_i64(*ms),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(text) => chrono::DateTime::parse_from_rfc3339(&text)
                .map(|t| t.timestamp_millis())
                .map_err(|e| D::Error::custom(format!("{text:?} is not an RFC 3339 time: {e}"))),
            serde_json::Value::Number(n) => {
                n.as_i64().ok_or_else(|| D::Error::custom(format!("{n} is not whole Unix milliseconds")))
            }
            other => Err(D::Error::custom(format!("{other} is not a time (RFC 3339 or Unix milliseconds)"))),
        }
    }
}

/// A percentage split of contexts between variations.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rollout {
    /// Attribute (or reference) hashed to choose the bucket; empty means
    /// `key`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket_by: String,
    /// The context kind bucketed; empty: the default kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context_kind: String,
    /// Hash seed; when absent it derives from the flag's salt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Variations in bucket order, weights in 1/100000.
    pub variations: Vec<WeightedVariation>,
    /// How a context's bucket is computed: absent, flagstream's own
    /// (XXH3-64 with `seed`); or an imported system's, so a rollout
    /// imported from it keeps every context in the variation it had
    /// (docs/EVALUATION.md, "Imported bucketing").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucketing: Option<Bucketing>,
}

/// Another system's bucketing, reproduced exactly (docs/EVALUATION.md,
/// "Imported bucketing"). In files: `{launchdarkly: {prefix: …}}` or
/// `{unleash: {group: …, seed: …, modulus: …}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "BucketingDoc", into = "BucketingDoc")]
pub enum Bucketing {
    /// LaunchDarkly's: the first 15 hex digits of SHA-1 over `"<prefix>.<value>"`
    /// as a fraction of `0xFFFFFFFFFFFFFFF` (single precision), compared with
    /// the running sum of the weights (single precision); past the last
    /// sum, the last variation. An unbucketable context is at 0.
    Launchdarkly {
        /// `"<flag key>.<salt>"` (a segment rule: `"<segment key>.<salt>"`),
        /// or the rollout's seed in decimal.
        prefix: String,
    },
    /// Unleash's: MurmurHash3 (x86, 32 bits) with `seed` over
    /// `"<group>:<value>"`, modulo `modulus`, scaled to 100,000 (so
    /// `modulus` divides 100,000); a context without the value is at
    /// bucket 0 in a rollout (the first variation with a weight) and never
    /// inside a weighted segment rule.
    Unleash {
        /// The group id (Unleash's `groupId`, by default the feature name).
        group: String,
        /// The hash seed: 0 for a rollout, 86028157 for variants.
        #[serde(default)]
        seed: u32,
        /// The hash's modulus: 100 for a rollout percentage, the variants'
        /// total weight (1000) for variants.
        modulus: u32,
    },
}

/// One variation's share of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightedVariation {
    /// Index into the flag's variations.
    pub variation: u32,
    /// Share in units of 1/100000.
    pub weight: u32,
}

/// Another flag that must return a given variation first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prerequisite {
    /// The prerequisite flag's key.
    pub key: String,
    /// The variation index it must return.
    pub variation: u32,
}

/// A reusable set of contexts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// Unique key within the environment.
    pub key: String,
    /// Context keys always in the segment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included: Vec<String>,
    /// Context keys never in it (unless also included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded: Vec<String>,
    /// Keys of other context kinds always in the segment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_contexts: Vec<KindKeys>,
    /// Keys of other context kinds never in it (unless also included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excluded_contexts: Vec<KindKeys>,
    /// A context that matches any rule is in the segment.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SegmentRule>,
    /// Bucketing salt of weighted rules; empty means the key.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub salt: String,
    /// Bumped by the relay on every change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub version: u64,
    /// Environment revision that last changed this segment.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub revision: u64,
    /// Free text for humans.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

impl Segment {
    /// The salt used for bucketing: `salt`, or the key when it is empty.
    pub fn effective_salt(&self) -> &str {
        if self.salt.is_empty() { &self.key } else { &self.salt }
    }
}

/// Keys of one context kind, for a segment's include and exclude lists.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindKeys {
    /// The context kind.
    pub context_kind: String,
    /// Its keys, matched exactly.
    pub values: Vec<String>,
}

/// A segment rule: every clause must match and, with a weight, the
/// context's bucket must fall inside it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentRule {
    /// Optional id, for humans and audit.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub id: String,
    /// Clauses joined by AND (`segment_match` allowed: nested segments).
    /// May be empty only with a weight ("10% of everyone").
    #[serde(default)]
    pub clauses: Vec<Clause>,
    /// Share of the matching contexts in the segment, in units of 1/100000;
    /// absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    /// Attribute (or reference) hashed for the weight; empty: `key`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub bucket_by: String,
    /// The context kind bucketed for the weight; empty: the default kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rollout_context_kind: String,
    /// How the weight's bucket is computed (see [`Rollout::bucketing`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucketing: Option<Bucketing>,
}

/// A whole environment's flags and segments: the file format of `flagctl
/// export`, offline mode and the test suite.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlagSet {
    /// The flags.
    #[serde(default)]
    pub flags: Vec<Flag>,
    /// The segments.
    #[serde(default)]
    pub segments: Vec<Segment>,
}
