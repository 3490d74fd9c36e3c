//! Attribute references: which value of which context kind a clause, a
//! rollout or a segment weight reads, parsed once when a flag is compiled.
//!
//! An attribute is a plain name (`plan`, `key`, `kind`), or a reference
//! into nested values starting with `/`: `/address/city` reads the `city`
//! property of the object attribute `address`. In a reference `~1` stands
//! for `/` and `~0` for `~` inside a name, as in JSON Pointer (RFC 6901);
//! array elements are not addressable. docs/EVALUATION.md "Attribute
//! references" is the contract, including every error below.

pub use crate::error::ReferenceError;
use crate::short::ShortStr;

/// The kind name of the default kind of a multi-kind context.
pub const USER_KIND: &str = "user";

/// What a reference names on one kind's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attr {
    /// The kind's key.
    Key,
    /// Every kind the context has (a clause on `kind` ignores
    /// `context_kind`).
    Kind,
    /// A top-level attribute.
    Name(ShortStr),
    /// A nested value: the top-level attribute, then object properties.
    Path(Box<[Box<str>]>),
}

/// Which kind of a context a clause or rollout reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KindSel {
    /// A single-kind context's own kind; a multi-kind context's `user`.
    Default,
    /// That kind.
    Named(ShortStr),
}

impl KindSel {
    /// From a `context_kind` field (empty: the default kind).
    pub(crate) fn parse(kind: &str) -> KindSel {
        if kind.is_empty() { KindSel::Default } else { KindSel::Named(kind.into()) }
    }
}

/// Parses an attribute: empty, `key` and `/key` are the key; `kind` and
/// `/kind` the kinds; `/a/b` a path; anything else not starting with `/` a
/// top-level name taken literally.
pub(crate) fn parse_attr(s: &str) -> Result<Attr, ReferenceError> {
    let Some(reference) = s.strip_prefix('/') else {
        return Ok(match s {
            "" | "key" => Attr::Key,
            "kind" => Attr::Kind,
            name => Attr::Name(name.into()),
        });
    };
    if reference.is_empty() {
        return Err(ReferenceError::Empty);
    }
    let mut parts = Vec::new();
    for (i, raw) in reference.split('/').enumerate() {
        if raw.is_empty() {
            return Err(ReferenceError::EmptyComponent(i));
        }
        parts.push(unescape(raw).ok_or(ReferenceError::BadEscape(i))?);
    }
    Ok(match parts.as_slice() {
        [one] if one.as_ref() == "key" => Attr::Key,
        [one] if one.as_ref() == "kind" => Attr::Kind,
        [_] => Attr::Name(parts.pop().expect("one part").into()),
        _ => Attr::Path(parts.into_boxed_slice()),
    })
}

fn unescape(raw: &str) -> Option<Box<str>> {
    if !raw.contains('~') {
        return Some(raw.into());
    }
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '~' => match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            },
            c => out.push(c),
        }
    }
    Some(out.into())
}

/// Why a context kind name is not acceptable, or `None` when it is: 1–256
/// bytes of `A-Z a-z 0-9 . _ -`, and neither `kind` nor `multi`.
pub fn kind_problem(kind: &str) -> Option<String> {
    if kind.is_empty() {
        return Some("a context kind must not be empty".into());
    }
    if kind.len() > 256 {
        return Some(format!("{} bytes, limit 256", kind.len()));
    }
    if kind == "kind" || kind == "multi" {
        return Some(format!("{kind:?} is reserved and cannot be a context kind"));
    }
    if !kind.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return Some(format!("{kind:?}: a context kind uses A-Z a-z 0-9 . _ -"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_references() {
        assert_eq!(parse_attr(""), Ok(Attr::Key));
        assert_eq!(parse_attr("key"), Ok(Attr::Key));
        assert_eq!(parse_attr("/key"), Ok(Attr::Key));
        assert_eq!(parse_attr("/kind"), Ok(Attr::Kind));
        assert_eq!(parse_attr("plan"), Ok(Attr::Name("plan".into())));
        assert_eq!(parse_attr("/plan"), Ok(Attr::Name("plan".into())));
        // A name without a leading slash is literal, slashes and all.
        assert_eq!(parse_attr("a/b"), Ok(Attr::Name("a/b".into())));
        assert_eq!(parse_attr("/address/city"), Ok(Attr::Path(vec!["address".into(), "city".into()].into())));
        assert_eq!(parse_attr("/a~1b/c~0d"), Ok(Attr::Path(vec!["a/b".into(), "c~d".into()].into())));
        assert_eq!(parse_attr("/~1x"), Ok(Attr::Name("/x".into())));
    }

    #[test]
    fn malformed_references() {
        assert_eq!(parse_attr("/"), Err(ReferenceError::Empty));
        assert_eq!(parse_attr("/a//b"), Err(ReferenceError::EmptyComponent(1)));
        assert_eq!(parse_attr("/a/"), Err(ReferenceError::EmptyComponent(1)));
        assert_eq!(parse_attr("/a~2"), Err(ReferenceError::BadEscape(0)));
        assert_eq!(parse_attr("/a/b~"), Err(ReferenceError::BadEscape(1)));
    }

    #[test]
    fn kind_names() {
        assert_eq!(kind_problem("org"), None);
        assert_eq!(kind_problem("device.v2_x-y"), None);
        for bad in ["", "kind", "multi", "a b", "ü"] {
            assert!(kind_problem(bad).is_some(), "{bad:?}");
        }
    }
}
