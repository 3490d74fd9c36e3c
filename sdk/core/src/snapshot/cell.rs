//! One flag of a snapshot ([`FlagCell`]: compiled, or still in wire form
//! and compiled on first use, with its usage counters and its cost) and
//! its entry in the key index ([`Slot`], with the constant facts
//! ([`Head`]) that answer a constant flag from the index alone).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use once_cell::race::OnceBox;
use smol_str::SmolStr;

use super::index::Keyed;
use crate::compile::compile_raw;
use crate::compiled::{CompiledFlag, Constant};
use crate::limit::Limits;
use crate::model::FlagType;
use crate::usage::FlagUsage;
use crate::validate::ItemCost;

/// What the key index holds per flag: its position, and for a flag compiled
/// when the index was built, enough to answer a constant flag from the index
/// entry alone without touching the compiled flag (one cache miss fewer on a
/// random lookup).
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// Short keys held in place: a lookup compares them without a
    /// pointer to follow (one cache miss fewer on a random key).
    pub(crate) key: SmolStr,
    /// The flag's position in the snapshot's flags, for a
    /// [`crate::FlagHandle`] to keep.
    pub(crate) index: u32,
    /// The flag at that position, held here too: a lookup by key reaches the
    /// flag without a read of the flags array (one cache miss fewer).
    pub(crate) cell: Arc<FlagCell>,
    /// `None` for a flag that was still in wire form (see [`FlagCell`]).
    pub(crate) head: Option<Head>,
}

/// The context-independent facts of a compiled flag.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub(crate) flag_type: FlagType,
    pub(crate) version: u64,
    pub(crate) constant: Option<Constant>,
}

impl Head {
    pub(super) fn of(f: &CompiledFlag) -> Head {
        Head { flag_type: f.flag_type, version: f.version, constant: f.constant.clone() }
    }
}

/// One flag of a snapshot: compiled, or still in its wire form and compiled
/// on first use.
///
/// The lazy form exists for cold starts from the cache: decoding, converting
/// and compiling 10,000 flags takes tens of milliseconds, so a client built
/// from its cache indexes the raw bytes (checksum-verified), serves at once,
/// and compiles each flag the first time something reads it, while a
/// background warm-up compiles the rest. First use is lock-free: racing
/// readers may both compile, one result is kept ([`OnceBox`]).
///
/// The cell also holds the flag's usage counters ([`FlagUsage`]): a cell is
/// shared by every snapshot in which the flag did not change, so the counts
/// follow it across revisions.
#[derive(Debug)]
pub(crate) struct FlagCell {
    pub(crate) usage: FlagUsage,
    form: Form,
    /// What the flag adds to its environment's totals, kept so a change
    /// to the environment validates only what changed
    /// (`Snapshot::apply`); read from the compiled form on first need
    /// for a flag that was not validated here (one that arrived in wire
    /// form).
    pub(super) cost: OnceLock<ItemCost>,
}

#[derive(Debug)]
enum Form {
    Compiled(CompiledFlag),
    Lazy { key: Arc<str>, raw: Bytes, limits: Arc<Limits>, compiled: OnceBox<CompiledFlag> },
}

impl FlagCell {
    pub(super) fn compiled(flag: CompiledFlag, cost: Option<ItemCost>) -> FlagCell {
        FlagCell {
            usage: FlagUsage::default(),
            form: Form::Compiled(flag),
            cost: cost.map_or_else(OnceLock::new, OnceLock::from),
        }
    }

    /// A flag in wire form (its key already read), compiled under
    /// `limits` on first use.
    pub(super) fn lazy(key: Arc<str>, raw: Bytes, limits: Arc<Limits>) -> FlagCell {
        FlagCell {
            usage: FlagUsage::default(),
            form: Form::Lazy { key, raw, limits, compiled: OnceBox::new() },
            cost: OnceLock::new(),
        }
    }

    /// The flag's [`ItemCost`]: as validation found it, else from the
    /// compiled form (compiling the flag if it is still in wire form, as
    /// the warm-up does anyway): its regex bytes as compiling charged
    /// them, its encoded size the wire bytes' (a model's, encoded to
    /// measure, for compiled data that was never validated).
    pub(super) fn cost(&self) -> ItemCost {
        *self.cost.get_or_init(|| {
            let compiled = self.get();
            let encoded = match &self.form {
                Form::Lazy { raw, .. } => raw.len(),
                Form::Compiled(f) => prost::Message::encoded_len(&crate::wire::flag_to_proto(&f.source)),
            };
            ItemCost::new(encoded, compiled.regex_bytes)
        })
    }

    /// The compiled flag, compiling it now if it is still in wire form.
    #[inline]
    pub(crate) fn get(&self) -> &CompiledFlag {
        match &self.form {
            Form::Compiled(f) => f,
            Form::Lazy { key, raw, limits, compiled } => {
                compiled.get_or_init(|| Box::new(compile_raw(key, raw, limits)))
            }
        }
    }

    /// The compiled flag if it is compiled already.
    pub(super) fn get_now(&self) -> Option<&CompiledFlag> {
        match &self.form {
            Form::Compiled(f) => Some(f),
            Form::Lazy { compiled, .. } => compiled.get(),
        }
    }

    /// The flag key, without compiling.
    pub(crate) fn key(&self) -> &str {
        match &self.form {
            Form::Compiled(f) => &f.source.key,
            Form::Lazy { key, .. } => key,
        }
    }
}

impl Slot {
    /// The index entry of the flag in `cell`, at position `index`.
    pub(super) fn of(cell: &Arc<FlagCell>, index: usize) -> Slot {
        let key = match &cell.form {
            Form::Lazy { key, .. } => SmolStr::from(key.clone()),
            Form::Compiled(c) => SmolStr::new(&c.source.key),
        };
        Slot { key, index: index as u32, cell: cell.clone(), head: cell.get_now().map(Head::of) }
    }
}

impl Keyed for Slot {
    #[inline]
    fn key(&self) -> &str {
        &self.key
    }
}
