//! A JS thread's tables: the open clients and prebuilt contexts by id, and
//! the values form's names and current values, in one thread-local so
//! that an evaluation reaches all of them with one lookup (in a shared
//! library each lookup is a call). What reads them is `fast.rs` (the
//! evaluation callbacks), `js_context.rs` (contexts) and `values.rs` (the
//! values form: its reading of a [`Shape`] lives there); this module
//! imports none of them.

use std::cell::RefCell;

use flagstream::{Client, Context};

/// A table of values by id, reusing freed ids.
pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    free: Vec<u32>,
}

impl<T> Table<T> {
    const fn new() -> Self {
        Table { slots: Vec::new(), free: Vec::new() }
    }

    pub(crate) fn insert(&mut self, v: T) -> u32 {
        if let Some(id) = self.free.pop() {
            self.slots[id as usize] = Some(v);
            return id;
        }
        self.slots.push(Some(v));
        (self.slots.len() - 1) as u32
    }

    pub(crate) fn remove(&mut self, id: u32) -> Option<T> {
        let v = self.slots.get_mut(id as usize)?.take();
        if v.is_some() {
            self.free.push(id);
        }
        v
    }

    pub(crate) fn get(&self, id: u32) -> Option<&T> {
        self.slots.get(id as usize)?.as_ref()
    }

    /// Replaces the value of the live id `id`; false when `id` is not live.
    pub(crate) fn replace(&mut self, id: u32, v: T) -> bool {
        match self.slots.get_mut(id as usize) {
            Some(slot @ Some(_)) => {
                *slot = Some(v);
                true
            }
            _ => false,
        }
    }
}

/// A JS thread's tables, in one thread-local so that an evaluation reaches
/// all of them with one lookup (in a shared library each lookup is a call).
pub(crate) struct Tables {
    /// The open clients.
    pub(crate) clients: RefCell<Table<Client>>,
    /// The prebuilt contexts.
    pub(crate) contexts: RefCell<Table<Context<'static>>>,
    /// The names and current values of the values form (`crate::values`).
    pub(crate) shape: RefCell<Shape>,
}

thread_local! {
    /// This JS thread's tables.
    pub(crate) static TABLES: Tables = const {
        Tables {
            clients: RefCell::new(Table::new()),
            contexts: RefCell::new(Table::new()),
            shape: RefCell::new(Shape::new()),
        }
    };
}

/// One value held: a string (and whether the packed form reads it: no
/// U+FFFD, what a lone surrogate reads as), a safe integer, a boolean,
/// nothing (`null`/`undefined`: a missing attribute), or a value this form
/// does not take (index.js passes none: the context reads as `None`).
pub(crate) enum Held {
    Skip,
    Str(String, bool),
    Num(f64),
    Bool(bool),
    Other,
}

/// The names and values of the values form.
pub(crate) struct Shape {
    pub(crate) names: Vec<String>,
    pub(crate) values: Vec<Held>,
    /// The positions of the names `key` and `kind`, found once.
    pub(crate) key_at: Option<usize>,
    pub(crate) kind_at: Option<usize>,
}

impl Shape {
    pub(crate) const fn new() -> Self {
        Shape { names: Vec::new(), values: Vec::new(), key_at: None, kind_at: None }
    }
}
