//! Every error type of the core, in one place at the bottom of the crate:
//! what an evaluation reports instead of a value ([`ErrorKind`]), what
//! validation and the wire mapping report ([`ValidationError`]s with field
//! paths), why an attribute reference does not parse ([`ReferenceError`]),
//! and the crate-internal reasons a pattern or an item was not compiled.
//! Nothing here depends on another module of the crate.

use std::fmt;

/// What went wrong when the caller's default was returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// No flag with that key.
    FlagNotFound,
    /// The flag's type does not fit the requested type.
    WrongType,
    /// The flag's data is inconsistent (bypassed validation: too-deep or
    /// cyclic prerequisites or segments, a malformed attribute reference).
    MalformedFlag,
    /// The SDK holds no data yet.
    NotReady,
}

impl ErrorKind {
    /// The upper-case name as used on the wire and in docs.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::FlagNotFound => "FLAG_NOT_FOUND",
            ErrorKind::WrongType => "WRONG_TYPE",
            ErrorKind::MalformedFlag => "MALFORMED_FLAG",
            ErrorKind::NotReady => "NOT_READY",
        }
    }
}

/// One problem, with the path of the field it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// Where: `flags["checkout"].rules[2].clauses[0].op`.
    pub path: String,
    /// What is wrong, naming the limit when one applies.
    pub message: String,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every problem found in one validation run (never empty).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", display_all(.0))]
pub struct ValidationErrors(pub Vec<ValidationError>);

fn display_all(errors: &[ValidationError]) -> String {
    let mut out = String::new();
    for (i, e) in errors.iter().enumerate() {
        if i > 0 {
            out.push_str("; ");
        }
        out.push_str(&e.to_string());
    }
    out
}

impl ValidationErrors {
    /// One problem at `path`.
    pub(crate) fn at(path: impl Into<String>, message: impl Into<String>) -> ValidationErrors {
        ValidationErrors(vec![ValidationError { path: path.into(), message: message.into() }])
    }

    /// The first problem (there always is one).
    pub fn first(&self) -> Option<&ValidationError> {
        self.0.first()
    }

    /// The [`Limits`](crate::Limits) fields named by these errors (messages
    /// that end in `(max_…)`), each once, sorted: what a relay counts as
    /// limit hits.
    pub fn limits(&self) -> std::collections::BTreeSet<&str> {
        self.0
            .iter()
            .filter_map(|e| e.message.strip_suffix(')')?.rsplit_once('(').map(|(_, name)| name))
            .filter(|name| {
                name.starts_with("max_") && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_')
            })
            .collect()
    }
}

/// Why an attribute reference does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    /// `/` alone.
    #[error("the reference \"/\" names nothing")]
    Empty,
    /// `/a//b` or `/a/`: the component at this 0-based position is empty.
    #[error("component {} of the reference is empty (`//` or a trailing `/`)", .0 + 1)]
    EmptyComponent(usize),
    /// A `~` not followed by `0` or `1`, in the component at this position.
    #[error(
        "component {} of the reference has a `~` not followed by 0 or 1 (write `~0` for `~`, `~1` for `/`)",
        .0 + 1
    )]
    BadEscape(usize),
}

/// Which bound refused a pattern's compiled size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RegexBound {
    /// One pattern's own limit (`max_regex_compiled`).
    Pattern,
    /// What was left of the flag's or segment's budget.
    Item,
}

/// Why a pattern was not compiled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RegexError {
    /// The item already compiled `max_regex_patterns` patterns.
    Patterns,
    /// The pattern does not parse.
    Syntax(String),
    /// Compiling it would take more than `limit` bytes (`bound` set it).
    TooBig { limit: usize, bound: RegexBound },
}

/// Why a clause or a schedule could not be compiled (only reachable with
/// unvalidated data; validation reports the same problems with a path).
#[derive(Debug)]
pub(crate) struct Uncompilable;
