//! Short strings as evaluation compares them: attribute and kind names,
//! `in` values, keys. [`ShortStr`] keeps up to 22 bytes inline, so a
//! compiled clause holds its attribute name and small value lists in its
//! own cache line instead of behind a pointer each; [`eq`] compares short
//! byte strings with a few word loads instead of a call to `memcmp`.
//! [`Name`] is the public face of the same storage: a rule id or flag key
//! in an owned evaluation result, copied (or, when long, shared) without
//! an allocation.

use std::sync::Arc;

/// Bytes a [`ShortStr`] holds without a heap allocation.
pub(crate) const INLINE: usize = 22;

/// A string stored inline when it is short (the common case for names and
/// clause values), on the heap otherwise. Compared as bytes.
#[derive(Clone, PartialEq, Eq)]
pub(crate) enum ShortStr {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Arc<str>),
}

impl ShortStr {
    pub(crate) fn new(s: &str) -> ShortStr {
        if s.len() <= INLINE {
            let mut bytes = [0; INLINE];
            bytes[..s.len()].copy_from_slice(s.as_bytes());
            ShortStr::Inline { len: s.len() as u8, bytes }
        } else {
            ShortStr::Heap(s.into())
        }
    }

    /// The string's bytes (always valid UTF-8: built from a `&str`).
    #[inline(always)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        match self {
            ShortStr::Inline { len, bytes } => &bytes[..usize::from(*len)],
            ShortStr::Heap(s) => s.as_bytes(),
        }
    }

    /// The string (for messages and the rare paths that need a `&str`).
    pub(crate) fn as_str(&self) -> &str {
        match self {
            // Built from a whole `&str`: always valid UTF-8, never the default.
            ShortStr::Inline { .. } => std::str::from_utf8(self.as_bytes()).unwrap_or_default(),
            ShortStr::Heap(s) => s,
        }
    }

    /// Equal to `s`?
    #[inline(always)]
    pub(crate) fn is(&self, s: &str) -> bool {
        eq(self.as_bytes(), s.as_bytes())
    }
}

impl std::fmt::Debug for ShortStr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl From<&str> for ShortStr {
    fn from(s: &str) -> ShortStr {
        ShortStr::new(s)
    }
}

impl From<Box<str>> for ShortStr {
    fn from(s: Box<str>) -> ShortStr {
        if s.len() <= INLINE { ShortStr::new(&s) } else { ShortStr::Heap(s.into()) }
    }
}

/// A name (a rule id, a flag key) held by an owned evaluation result: up to
/// 22 bytes inline, a longer one shared with the snapshot it came from.
/// Making one never allocates. Reads as a `&str`.
#[derive(Clone, PartialEq, Eq)]
pub struct Name(ShortStr);

impl Name {
    /// A copy of `s` if it fits inline, else a share of it.
    pub(crate) fn of(s: &Arc<str>) -> Name {
        if s.len() <= INLINE { Name(ShortStr::new(s)) } else { Name(ShortStr::Heap(s.clone())) }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl std::ops::Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for Name {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_str().fmt(f)
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, other: &str) -> bool {
        self.0.is(other)
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, other: &&str) -> bool {
        self.0.is(other)
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Name {
        Name(ShortStr::new(s))
    }
}

/// Byte-string equality without a `memcmp` call for up to 16 bytes: two
/// overlapping word loads per side. Longer strings use the slice compare.
#[inline(always)]
pub(crate) fn eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    match n {
        0 => true,
        1..=3 => a[0] == b[0] && a[n / 2] == b[n / 2] && a[n - 1] == b[n - 1],
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        _ => a == b,
    }
}

#[inline(always)]
fn word4(s: &[u8], at: usize) -> u32 {
    let mut w = [0; 4];
    w.copy_from_slice(&s[at..at + 4]);
    u32::from_ne_bytes(w)
}

#[inline(always)]
fn word8(s: &[u8], at: usize) -> u64 {
    let mut w = [0; 8];
    w.copy_from_slice(&s[at..at + 8]);
    u64::from_ne_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `eq` agrees with slice equality on every length it special-cases,
    /// including differences at each position.
    #[test]
    fn eq_matches_slice_equality() {
        let base: Vec<u8> = (0..40u8).map(|i| b'a' + i % 26).collect();
        for n in 0..=40 {
            let a = &base[..n];
            assert!(eq(a, a), "len {n}");
            for at in 0..n {
                let mut b = a.to_vec();
                b[at] ^= 0x20;
                assert!(!eq(a, &b), "len {n}, differing at {at}");
            }
            if n > 0 {
                assert!(!eq(a, &base[..n - 1]), "len {n} vs {}", n - 1);
            }
        }
    }

    /// Short strings stay inline, long ones go to the heap; both compare
    /// by content.
    #[test]
    fn short_strings() {
        let s = ShortStr::new("enterprise");
        assert!(matches!(s, ShortStr::Inline { len: 10, .. }));
        assert!(s.is("enterprise") && !s.is("enterprises") && !s.is("Enterprise"));
        assert_eq!(s.as_str(), "enterprise");
        let long = "x".repeat(INLINE + 1);
        let l = ShortStr::new(&long);
        assert!(matches!(l, ShortStr::Heap(_)));
        assert!(l.is(&long));
        assert_eq!(ShortStr::from(Box::<str>::from("plan")), ShortStr::new("plan"));
        assert_eq!(format!("{s:?}"), "\"enterprise\"");
        let id: Arc<str> = Arc::from("us-enterprise");
        let name = Name::of(&id);
        assert_eq!(Arc::strong_count(&id), 1, "a short name is copied, not shared");
        assert!(name == "us-enterprise" && name.len() == 13 && format!("{name}") == "us-enterprise");
        let long: Arc<str> = Arc::from(long.as_str());
        assert_eq!(Name::of(&long).as_str(), &*long);
        assert_eq!(Arc::strong_count(&long), 1, "the share was dropped with the name");
    }
}
