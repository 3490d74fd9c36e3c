//! Evaluation contexts: who a flag is evaluated for.
//!
//! A [`Context`] is a single kind (a `user`, an `org`, a `device`: a key
//! and attributes) or a multi-kind context holding several kinds at once,
//! each with its own key and attributes. It borrows whatever it can. Built
//! from `&str`, numbers and borrowed JSON it allocates nothing at all (up
//! to [`INLINE_ATTRIBUTES`] attributes live inline; a multi-kind context
//! can borrow its further kinds with [`Context::multi_borrowed`]); built
//! from `String`s it owns them. Either way evaluation reads it without
//! allocating. Attribute lookup is a linear scan: contexts carry a handful
//! of attributes, where a scan beats hashing.

use std::borrow::Cow;

use crate::reference::{Attr, KindSel, USER_KIND};
use crate::short::{self, ShortStr};

mod attr;
mod file;
mod seq;

pub use attr::{AttrValue, Scalar};
pub(crate) use attr::{Found, ScalarRef};
use seq::InlineVec;
pub use seq::Seq;

/// Attributes stored inline before the context allocates. Four covers the
/// common "key + country + plan + version" shape.
pub const INLINE_ATTRIBUTES: usize = 4;

/// The kind of a context built without one.
pub const DEFAULT_KIND: &str = USER_KIND;

/// Who a flag is evaluated for: one kind (a key, a kind name and named
/// attributes), or several kinds at once.
///
/// A multi-kind context is this context's kind followed by further kinds
/// ([`Context::and`], [`Context::multi`]); every kind name appears once.
/// Clauses, targets and rollouts name the kind they read (`context_kind`);
/// without one they read a single-kind context's own kind, or a multi-kind
/// context's `user` kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Context<'a> {
    key: Cow<'a, str>,
    kind: Cow<'a, str>,
    attrs: InlineVec<(Cow<'a, str>, AttrValue<'a>), INLINE_ATTRIBUTES>,
    /// The further kinds of a multi-kind context, each single-kind.
    more: Seq<'a, Context<'a>>,
}

impl<'a> Context<'a> {
    /// A context of kind `user` with this targeting key.
    #[inline(always)]
    pub fn new(key: impl Into<Cow<'a, str>>) -> Self {
        Context {
            key: key.into(),
            kind: Cow::Borrowed(DEFAULT_KIND),
            attrs: InlineVec::new(),
            more: Seq::Borrowed(&[]),
        }
    }

    /// Sets the kind of this context (of a multi-kind context: of its
    /// first kind). Default `user`; empty means `user`.
    #[inline(always)]
    pub fn kind(mut self, kind: impl Into<Cow<'a, str>>) -> Self {
        let kind = kind.into();
        self.kind = if kind.is_empty() { Cow::Borrowed(DEFAULT_KIND) } else { kind };
        self
    }

    /// Sets an attribute (of a multi-kind context: of its first kind),
    /// replacing any earlier value of that name. The names `key` and `kind`
    /// are reserved for the context's own key and kind and are ignored
    /// here.
    #[inline(always)]
    pub fn with(mut self, name: impl Into<Cow<'a, str>>, value: impl Into<AttrValue<'a>>) -> Self {
        self.set(name, value);
        self
    }

    /// Sets an attribute in place; see [`Context::with`].
    #[inline]
    pub fn set(&mut self, name: impl Into<Cow<'a, str>>, value: impl Into<AttrValue<'a>>) {
        let name = name.into();
        if name == "key" || name == "kind" {
            return;
        }
        let value = value.into();
        match self.attrs.as_mut_slice().iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.attrs.push((name, value)),
        }
    }

    /// Removes an attribute (of a multi-kind context: of its first kind);
    /// returns its value, if it was set.
    pub fn remove(&mut self, name: &str) -> Option<AttrValue<'a>> {
        let i = self.attrs.iter().position(|(n, _)| n == name)?;
        Some(self.attrs.remove(i).1)
    }

    /// Sets an attribute whose name the caller knows is not set yet (the
    /// names come from a map), without the scan of [`Context::set`]: a
    /// context read from a request is built in linear time.
    #[inline]
    pub(crate) fn push_distinct(&mut self, name: Cow<'a, str>, value: AttrValue<'a>) {
        if name == "key" || name == "kind" {
            return;
        }
        self.attrs.push((name, value));
    }

    /// A multi-kind context of single-kind contexts whose kind names the
    /// caller checked are distinct, in order, without the replacement scan
    /// of [`Context::and`]. `None` when `kinds` is empty.
    pub(crate) fn of_distinct_kinds(kinds: Vec<Context<'a>>) -> Option<Self> {
        let mut kinds = kinds.into_iter();
        let first = kinds.next()?;
        let more: Vec<Context<'a>> = kinds.collect();
        Some(if more.is_empty() { first } else { Context { more: Seq::Owned(more), ..first } })
    }

    /// This context with the kinds of `other` added (a multi-kind
    /// context). A kind already present is replaced by `other`'s.
    pub fn and(mut self, other: Context<'a>) -> Self {
        for kind in other.into_kinds() {
            if kind.kind == self.kind {
                let more = std::mem::take(&mut self.more);
                self = Context { more, ..kind };
                continue;
            }
            let more = self.more.to_mut();
            match more.iter_mut().find(|k| k.kind == kind.kind) {
                Some(slot) => *slot = kind,
                None => more.push(kind),
            }
        }
        self
    }

    /// A multi-kind context of `kinds` (each may itself be multi-kind: its
    /// kinds are taken). A later kind of the same name replaces an earlier
    /// one. `None` when `kinds` is empty.
    pub fn multi(kinds: impl IntoIterator<Item = Context<'a>>) -> Option<Self> {
        // Indexed by kind name: linear in the number of kinds, where
        // folding with `and` would scan the kinds so far for each.
        let mut out: Vec<Context<'a>> = Vec::new();
        let mut index: std::collections::HashMap<Cow<'a, str>, usize> = std::collections::HashMap::new();
        for kind in kinds.into_iter().flat_map(Context::into_kinds) {
            match index.get(&kind.kind) {
                Some(&i) => out[i] = kind,
                None => {
                    index.insert(kind.kind.clone(), out.len());
                    out.push(kind);
                }
            }
        }
        Context::of_distinct_kinds(out)
    }

    /// A multi-kind context of `first` and further single-kind contexts it
    /// borrows, without allocating. Kind names should be distinct: a
    /// lookup takes the first kind of a name. Kinds of `more` that are
    /// themselves multi-kind contribute only their first kind.
    pub fn multi_borrowed(first: Context<'a>, more: &'a [Context<'a>]) -> Self {
        Context { more: Seq::Borrowed(more), ..first }
    }

    /// The targeting key (of a multi-kind context: of its first kind).
    #[inline]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The kind (of a multi-kind context: of its first kind).
    #[inline]
    pub fn context_kind(&self) -> &str {
        &self.kind
    }

    /// Whether this context holds more than one kind.
    #[inline]
    pub fn is_multi(&self) -> bool {
        !self.more.is_empty()
    }

    /// Each kind of this context as a single-kind context, first to last
    /// (the first yields this context itself).
    #[inline]
    pub fn kinds(&self) -> impl Iterator<Item = &Context<'a>> {
        std::iter::once(self).chain(self.more.iter())
    }

    /// The kind named `kind`, if this context has it.
    #[inline]
    pub fn get_kind(&self, kind: &str) -> Option<&Context<'a>> {
        self.kinds().find(|k| k.kind == kind)
    }

    /// [`Context::get_kind`] as evaluation calls it.
    #[inline(always)]
    fn kind_named(&self, kind: &ShortStr) -> Option<&Context<'a>> {
        self.kinds().find(|k| kind.is(&k.kind))
    }

    /// A named attribute of this context (of a multi-kind context: of its
    /// first kind), not `key`/`kind`.
    #[inline]
    pub fn attribute(&self, name: &str) -> Option<&AttrValue<'a>> {
        self.attrs.iter().find(|(n, _)| short::eq(n.as_bytes(), name.as_bytes())).map(|(_, v)| v)
    }

    /// A named attribute of the kind a clause without `context_kind` reads.
    #[inline(always)]
    pub(crate) fn default_attribute(&self, name: &ShortStr) -> Option<&AttrValue<'a>> {
        match self.select(&KindSel::Default) {
            Some(kind) => kind.attribute_named(name),
            None => None,
        }
    }

    /// [`Context::attribute`] as evaluation calls it.
    #[inline(always)]
    fn attribute_named(&self, name: &ShortStr) -> Option<&AttrValue<'a>> {
        for (n, v) in self.attrs.iter() {
            if name.is(n) {
                return Some(v);
            }
        }
        None
    }

    /// All named attributes in insertion order (of a multi-kind context: of
    /// its first kind).
    pub fn attributes(&self) -> impl Iterator<Item = (&str, &AttrValue<'a>)> {
        self.attrs.iter().map(|(n, v)| (n.as_ref(), v))
    }

    /// A copy that owns all its data.
    pub fn into_owned(self) -> Context<'static> {
        Context {
            key: Cow::Owned(self.key.into_owned()),
            kind: Cow::Owned(self.kind.into_owned()),
            attrs: self
                .attrs
                .into_iter()
                .map(|(n, v)| (Cow::Owned(n.into_owned()), v.into_owned()))
                .collect(),
            more: Seq::Owned(self.more.into_owned().into_iter().map(Context::into_owned).collect()),
        }
    }

    /// Each kind as its own single-kind context, owned.
    fn into_kinds(mut self) -> Vec<Context<'a>> {
        let more = std::mem::take(&mut self.more).into_owned();
        let mut out = Vec::with_capacity(1 + more.len());
        out.push(self);
        out.extend(more.into_iter().map(|mut k| {
            k.more = Seq::Borrowed(&[]);
            k
        }));
        out
    }

    /// The kind a clause or rollout reads: a single-kind context itself
    /// for the default, a multi-kind context's `user`, or the named kind.
    #[inline(always)]
    pub(crate) fn select(&self, sel: &KindSel) -> Option<&Context<'a>> {
        match sel {
            KindSel::Default if self.more.is_empty() => Some(self),
            KindSel::Default => self.get_kind(USER_KIND),
            KindSel::Named(kind) => self.kind_named(kind),
        }
    }

    /// Looks a value up the way clauses do, on the selected kind (`kind`
    /// gives that kind's name; clauses test every kind's name instead, see
    /// `CompiledClause::matches`).
    #[inline(always)]
    pub(crate) fn lookup<'s>(&'s self, sel: &KindSel, attr: &Attr) -> Option<Found<'s>> {
        let kind = self.select(sel)?;
        match attr {
            Attr::Key => Some(Found::Str(&kind.key)),
            Attr::Kind => Some(Found::Str(&kind.kind)),
            Attr::Name(name) => kind.attribute_named(name).and_then(found),
            Attr::Path(parts) => kind.lookup_path(parts),
        }
    }

    /// A nested value (kept out of line: the common lookups stay small
    /// enough to inline into clause matching).
    #[inline(never)]
    fn lookup_path<'s>(&'s self, parts: &[Box<str>]) -> Option<Found<'s>> {
        let (top, rest) = parts.split_first()?;
        let mut v = match self.attribute(top)? {
            AttrValue::Json(j) => j.as_ref(),
            // A scalar or list has no properties.
            _ => return None,
        };
        for part in rest {
            v = v.as_object()?.get(part.as_ref())?;
        }
        (!v.is_null()).then_some(Found::Json(v))
    }
}

/// A stored attribute as a clause sees it.
#[inline]
pub(crate) fn found<'s>(v: &'s AttrValue<'_>) -> Option<Found<'s>> {
    Some(match v {
        AttrValue::Scalar(s) => Found::Scalar(s),
        AttrValue::List(l) => Found::Values(l),
        // A null attribute is a missing one.
        AttrValue::Json(j) if j.is_null() => return None,
        AttrValue::Json(j) => Found::Json(j),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A null attribute reads as missing (so a negated clause does not
    /// match it); a context equals its owned copy.
    #[test]
    fn null_is_missing_and_owned_copies_are_equal() {
        let null = serde_json::Value::Null;
        let borrowed = Context::new("u").with("plan", &null);
        let owned = Context::new("u").with("plan", serde_json::Value::Null);
        for ctx in [&borrowed, &owned] {
            assert!(ctx.lookup(&KindSel::Default, &Attr::Name("plan".into())).is_none());
        }
        let groups = [Scalar::Str(Cow::Borrowed("a"))];
        let borrowed = Context::new("u").with("g", &groups[..]).and(Context::new("o").kind("org"));
        assert_eq!(borrowed.clone().into_owned(), borrowed);
        assert_eq!(Context::new("u").into_owned(), Context::new("u"));
    }

    /// Setting the same attribute twice keeps the last value, and the
    /// reserved names cannot shadow the key.
    #[test]
    fn set_replaces_and_reserves_key() {
        let ctx = Context::new("u1").with("plan", "free").with("plan", "pro").with("key", "evil");
        assert_eq!(ctx.attribute("plan"), Some(&AttrValue::from("pro")));
        assert_eq!(ctx.attributes().count(), 1);
        assert_eq!(ctx.key(), "u1");
    }

    /// The file form round-trips, and null attributes read as missing.
    #[test]
    fn file_form() {
        let ctx: Context<'static> = serde_json::from_str(
            r#"{"key":"u1","kind":"org","attributes":{"n":42,"tags":["a",1,true],"gone":null}}"#,
        )
        .unwrap();
        assert_eq!(ctx.context_kind(), "org");
        assert!(ctx.attribute("gone").is_none());
        let back = serde_json::to_value(&ctx).unwrap();
        assert_eq!(back["attributes"]["n"], 42);
        assert_eq!(back["attributes"]["tags"][2], true);
    }
}
