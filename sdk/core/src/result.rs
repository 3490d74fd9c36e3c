//! What an evaluation returns: a typed [`Detail`] (value, variation,
//! reason, versions, staleness), an untyped [`Evaluation`], and the
//! [`Reason`] both carry, borrowing names from the snapshot.

use crate::error::ErrorKind;
use crate::value::Value;

/// Why an evaluation returned what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason<'s> {
    /// The flag is off; its off variation was served.
    Off,
    /// The context key is individually targeted.
    TargetMatch,
    /// A rule matched.
    RuleMatch {
        /// 0-based rule index.
        index: u32,
        /// The rule's id (may be empty).
        id: &'s str,
        /// When the rule serves a schedule: its current step, 1-based
        /// (0 before the first step starts).
        step: Option<u32>,
    },
    /// Nothing matched; the fallthrough was served.
    Fallthrough {
        /// Whether a percentage rollout or a schedule chose the variation.
        rollout: bool,
        /// When the fallthrough is a schedule: its current step, 1-based
        /// (0 before the first step starts).
        step: Option<u32>,
    },
    /// A prerequisite did not return its required variation; the off
    /// variation was served.
    PrerequisiteFailed {
        /// The first prerequisite that failed.
        key: &'s str,
    },
    /// The caller's default was returned.
    Error(ErrorKind),
}

impl Reason<'_> {
    /// The reason's upper-case name as used on the wire and in docs.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Reason::Off => "OFF",
            Reason::TargetMatch => "TARGET_MATCH",
            Reason::RuleMatch { .. } => "RULE_MATCH",
            Reason::Fallthrough { .. } => "FALLTHROUGH",
            Reason::PrerequisiteFailed { .. } => "PREREQUISITE_FAILED",
            Reason::Error(_) => "ERROR",
        }
    }
}

/// A typed evaluation result.
#[derive(Debug, Clone, PartialEq)]
pub struct Detail<'s, T> {
    /// The served value, or the caller's default on error.
    pub value: T,
    /// Index of the served variation; `None` when the default was returned.
    pub variation: Option<u32>,
    /// Why.
    pub reason: Reason<'s>,
    /// Version of the evaluated flag (0 when not found).
    pub flag_version: u64,
    /// Revision of the snapshot evaluated against.
    pub revision: u64,
    /// Whether the SDK's data was stale (set by the client, never here).
    pub stale: bool,
}

/// An untyped result: the variation served (if any) and why.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evaluation<'s> {
    /// Index and value of the served variation; `None` on error.
    pub served: Option<(u32, &'s Value)>,
    /// Why.
    pub reason: Reason<'s>,
    /// Version of the evaluated flag (0 when not found).
    pub flag_version: u64,
}
