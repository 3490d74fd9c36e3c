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

    /// The OpenFeature reason this result maps to (the OpenFeature
    /// providers and OFREP): `DISABLED` (off, or a prerequisite failed and
    /// the off variation served), `TARGETING_MATCH` (a target or a rule),
    /// `SPLIT` (the fallthrough's rollout chose), `DEFAULT` (the fixed
    /// fallthrough), `ERROR`.
    pub fn openfeature_name(&self) -> &'static str {
        match self {
            Reason::Off | Reason::PrerequisiteFailed { .. } => "DISABLED",
            Reason::TargetMatch | Reason::RuleMatch { .. } => "TARGETING_MATCH",
            Reason::Fallthrough { rollout: true, .. } => "SPLIT",
            Reason::Fallthrough { rollout: false, .. } => "DEFAULT",
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

/// A reason's parts, each in a field of its own (absent where it does not
/// apply): the one flattening every binding and the owned detail use, so a
/// new reason or field changes one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReasonParts<'s> {
    /// `RULE_MATCH`: the rule's 0-based index.
    pub rule_index: Option<u32>,
    /// `RULE_MATCH`: the rule's id, when it has one (never empty).
    pub rule_id: Option<&'s str>,
    /// `PREREQUISITE_FAILED`: the first prerequisite that failed.
    pub prerequisite_key: Option<&'s str>,
    /// `ERROR`: what went wrong.
    pub error: Option<ErrorKind>,
    /// Whether a percentage rollout or a schedule chose the variation (a
    /// `FALLTHROUGH` either; a `RULE_MATCH` only a schedule: the reason does
    /// not say whether a rule's rollout chose).
    pub in_rollout: bool,
    /// A schedule's current step, 1-based (0 before the first step).
    pub schedule_step: Option<u32>,
}

impl<'s> Reason<'s> {
    /// This reason's parts, each in a field of its own.
    pub fn parts(&self) -> ReasonParts<'s> {
        match *self {
            Reason::RuleMatch { index, id, step } => ReasonParts {
                rule_index: Some(index),
                rule_id: (!id.is_empty()).then_some(id),
                in_rollout: step.is_some(),
                schedule_step: step,
                ..ReasonParts::default()
            },
            Reason::PrerequisiteFailed { key } => {
                ReasonParts { prerequisite_key: Some(key), ..ReasonParts::default() }
            }
            Reason::Error(e) => ReasonParts { error: Some(e), ..ReasonParts::default() },
            Reason::Fallthrough { rollout, step } => {
                ReasonParts { in_rollout: rollout, schedule_step: step, ..ReasonParts::default() }
            }
            Reason::Off | Reason::TargetMatch => ReasonParts::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every reason flattens to the fields that apply to it, and no other.
    #[test]
    fn parts_of_every_reason() {
        let none = ReasonParts::default();
        assert_eq!(Reason::Off.parts(), none);
        assert_eq!(Reason::TargetMatch.parts(), none);
        let rule = Reason::RuleMatch { index: 2, id: "us", step: None }.parts();
        assert_eq!((rule.rule_index, rule.rule_id, rule.in_rollout), (Some(2), Some("us"), false));
        let unnamed = Reason::RuleMatch { index: 0, id: "", step: Some(3) }.parts();
        assert_eq!((unnamed.rule_id, unnamed.in_rollout, unnamed.schedule_step), (None, true, Some(3)));
        let pre = Reason::PrerequisiteFailed { key: "base" }.parts();
        assert_eq!(pre, ReasonParts { prerequisite_key: Some("base"), ..none });
        assert_eq!(
            Reason::Error(ErrorKind::WrongType).parts(),
            ReasonParts { error: Some(ErrorKind::WrongType), ..none }
        );
        let split = Reason::Fallthrough { rollout: true, step: None }.parts();
        assert_eq!(split, ReasonParts { in_rollout: true, ..none });
    }
}
