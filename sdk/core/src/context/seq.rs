//! [`Seq`]: a borrowed or owned slice, like `Cow<[T]>` but covariant in
//! its lifetime. `Cow<'a, [Context<'a>]>` names its element type inside
//! `ToOwned::Owned`, which makes the whole `Context` invariant: a context
//! could then never borrow an array of contexts (or of scalars) that
//! itself borrows local data. `Seq` keeps `Context<'a>` covariant.

use std::ops::Deref;

/// A slice, borrowed or owned; equal when the elements are, however held.
#[derive(Debug)]
pub enum Seq<'a, T> {
    /// Borrowed elements.
    Borrowed(&'a [T]),
    /// Owned elements.
    Owned(Vec<T>),
}

impl<T: PartialEq> PartialEq for Seq<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T> Default for Seq<'_, T> {
    fn default() -> Self {
        Seq::Borrowed(&[])
    }
}

impl<T: Clone> Clone for Seq<'_, T> {
    fn clone(&self) -> Self {
        match self {
            Seq::Borrowed(s) => Seq::Borrowed(s),
            Seq::Owned(v) => Seq::Owned(v.clone()),
        }
    }
}

impl<T> Deref for Seq<'_, T> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            Seq::Borrowed(s) => s,
            Seq::Owned(v) => v,
        }
    }
}

impl<T: Clone> Seq<'_, T> {
    /// The owned elements, copying borrowed ones first.
    pub fn to_mut(&mut self) -> &mut Vec<T> {
        if let Seq::Borrowed(s) = self {
            *self = Seq::Owned(s.to_vec());
        }
        match self {
            Seq::Owned(v) => v,
            Seq::Borrowed(_) => unreachable!("made owned above"),
        }
    }

    /// The elements as a vector.
    pub fn into_owned(self) -> Vec<T> {
        match self {
            Seq::Borrowed(s) => s.to_vec(),
            Seq::Owned(v) => v,
        }
    }
}

/// Up to `N` elements inline, more on the heap; covariant in `T` (unlike
/// `SmallVec`, whose `Array::Item` projection makes it invariant).
#[derive(Debug, Clone)]
pub(crate) enum InlineVec<T, const N: usize> {
    /// At most `N`, no allocation.
    Inline(arrayvec::ArrayVec<T, N>),
    /// More than `N`.
    Heap(Vec<T>),
}

impl<T, const N: usize> InlineVec<T, N> {
    #[inline(always)]
    pub(crate) const fn new() -> Self {
        InlineVec::Inline(arrayvec::ArrayVec::new_const())
    }

    /// Appends, moving to the heap when the inline space is full.
    pub(crate) fn push(&mut self, item: T) {
        match self {
            InlineVec::Inline(a) => {
                if let Err(full) = a.try_push(item) {
                    let mut v: Vec<T> = Vec::with_capacity(N * 2);
                    v.extend(a.drain(..));
                    v.push(full.element());
                    *self = InlineVec::Heap(v);
                }
            }
            InlineVec::Heap(v) => v.push(item),
        }
    }

    /// Removes and returns the element at `i` (keeping the order).
    pub(crate) fn remove(&mut self, i: usize) -> T {
        match self {
            InlineVec::Inline(a) => a.remove(i),
            InlineVec::Heap(v) => v.remove(i),
        }
    }

    #[inline]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [T] {
        match self {
            InlineVec::Inline(a) => a,
            InlineVec::Heap(v) => v,
        }
    }
}

impl<T, const N: usize> Deref for InlineVec<T, N> {
    type Target = [T];

    #[inline]
    fn deref(&self) -> &[T] {
        match self {
            InlineVec::Inline(a) => a,
            InlineVec::Heap(v) => v,
        }
    }
}

impl<T: PartialEq, const N: usize> PartialEq for InlineVec<T, N> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T, const N: usize> FromIterator<T> for InlineVec<T, N> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut out = InlineVec::new();
        for item in iter {
            out.push(item);
        }
        out
    }
}

impl<T, const N: usize> IntoIterator for InlineVec<T, N> {
    type Item = T;
    type IntoIter = std::iter::Chain<arrayvec::IntoIter<T, N>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        match self {
            InlineVec::Inline(a) => a.into_iter().chain(Vec::new()),
            InlineVec::Heap(v) => arrayvec::ArrayVec::new().into_iter().chain(v),
        }
    }
}
