//! The report a validation run fills: every problem with its field path,
//! and the regex budget of the item being validated.

use crate::error::ValidationError;
use crate::operand::RegexBudget;

/// Collects errors under a path prefix.
pub(super) struct Report {
    pub(super) errors: Vec<ValidationError>,
    /// The regex budget of the item being validated.
    pub(super) regex: RegexBudget,
    /// "flag" or "segment": whose budget `regex` is.
    pub(super) item: &'static str,
}

impl Report {
    pub(super) fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(ValidationError { path: path.into(), message: message.into() });
    }

    pub(super) fn max(&mut self, path: &str, what: &str, n: usize, limit: usize) {
        if n > limit {
            self.err(path, format!("{n} {what}, limit {limit}"));
        }
    }
}
