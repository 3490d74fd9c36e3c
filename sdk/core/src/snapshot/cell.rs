//! One flag of a snapshot ([`Cell`]: its key and bytes and its compiled
//! form, made now or on first use, with its usage counters and its cost; no
//! model; [`FlagCell`] with the compiled form inline, [`ColdCell`] with it
//! in an allocation of its own made on first use) and its entry in the key
//! index ([`Slot`], in the SDK's index with the constant facts ([`Head`])
//! that answer a constant flag from the index alone).

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use once_cell::race::OnceBox;
use smol_str::SmolStr;

use super::index::Keyed;
use crate::compile::{compile_flag, compile_raw, decode};
use crate::compiled::{CompiledFlag, Constant};
use crate::limit::Limits;
use crate::model::{Flag, FlagType};
use crate::usage::FlagUsage;
use crate::validate::{Facts, ItemCost, Links};
use crate::wire;

/// What the key index holds per flag: its position, and for a flag compiled
/// when the index was built, enough to answer a constant flag from the index
/// entry alone without touching the compiled flag (one cache miss fewer on a
/// random lookup). `H` is the room for that: `Option<Head>` in the SDK's
/// index (104 bytes a slot), `()` in a snapshot compiling on use (the
/// relay's), whose evaluations take the cell (48 bytes a slot; see
/// `snapshot/keys.rs`).
#[derive(Debug, Clone)]
pub(crate) struct Slot<H> {
    /// Short keys held in place: a lookup compares them without a
    /// pointer to follow (one cache miss fewer on a random key).
    pub(crate) key: SmolStr,
    /// The flag's position in the snapshot's flags, for a
    /// [`crate::FlagHandle`] to keep.
    pub(crate) index: u32,
    /// The flag at that position, held here too: a lookup by key reaches the
    /// flag without a read of the flags array (one cache miss fewer).
    pub(crate) cell: Cell,
    /// In the SDK's index: `None` for a flag that was still in wire form
    /// (see [`FlagCell`]).
    pub(crate) head: H,
}

/// A slot's room for its flag's [`Head`].
pub(crate) trait HeadRoom: Clone + std::fmt::Debug {
    /// What a slot made for `cell` holds.
    fn of(cell: &Cell) -> Self;
    fn get(&self) -> Option<&Head>;
}

impl HeadRoom for Option<Head> {
    fn of(cell: &Cell) -> Self {
        cell.get_now().map(Head::of)
    }

    #[inline(always)]
    fn get(&self) -> Option<&Head> {
        self.as_ref()
    }
}

/// No room: a slot of a snapshot compiling on use.
impl HeadRoom for () {
    fn of(_: &Cell) -> Self {}

    #[inline(always)]
    fn get(&self) -> Option<&Head> {
        None
    }
}

/// What a key lookup finds: a slot's position, cell and head, whichever
/// index held it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Found<'a> {
    pub(crate) index: u32,
    pub(crate) cell: &'a Cell,
    pub(crate) head: Option<&'a Head>,
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

/// A flag of a snapshot as its key index and flag list hold it: a
/// [`FlagCell`] (compiled when written, or on first use from the SDK's
/// cache; its compiled form and usage counters inline, so evaluation
/// follows one pointer), or a [`ColdCell`] (a snapshot
/// [compiling on use](super::Snapshot::compiling_on_use), the relay's: its
/// compiled form and counters made on first evaluation in an allocation of
/// their own, so a flag never evaluated costs its bytes and facts, ~150
/// bytes, instead of ~600).
#[derive(Debug, Clone)]
pub(crate) enum Cell {
    Hot(Arc<FlagCell>),
    Cold(Arc<ColdCell>),
}

impl Cell {
    /// `flag` compiled now, or (`defer`) a [`ColdCell`] compiled on first
    /// use under `limits`; held with `raw`, its encoding (encoded here when
    /// `None`).
    pub(super) fn of(
        flag: &Flag,
        raw: Option<Bytes>,
        limits: &Arc<Limits>,
        cost: Option<ItemCost>,
        defer: bool,
    ) -> Cell {
        let raw =
            raw.unwrap_or_else(|| Bytes::from(prost::Message::encode_to_vec(&wire::flag_to_proto(flag))));
        if defer {
            return Cell::Cold(Arc::new(ColdCell {
                key: Arc::from(flag.key.as_str()),
                raw,
                limits: limits.clone(),
                facts: OnceLock::from(Facts::of(flag)),
                cost: cost.map_or_else(OnceLock::new, OnceLock::from),
                warm: OnceBox::new(),
            }));
        }
        Cell::Hot(Arc::new(FlagCell {
            usage: FlagUsage::default(),
            key: Arc::from(flag.key.as_str()),
            raw,
            form: Form::Compiled(compile_flag(flag, limits)),
            facts: OnceLock::from(Facts::of(flag)),
            cost: cost.map_or_else(OnceLock::new, OnceLock::from),
        }))
    }

    /// A flag in wire form (its key already read) compiled on first use
    /// under `limits`, a [`ColdCell`]: its facts and cost read from its
    /// bytes when first asked for.
    pub(super) fn cold(key: Arc<str>, raw: Bytes, limits: Arc<Limits>) -> Cell {
        Cell::Cold(Arc::new(ColdCell {
            key,
            raw,
            limits,
            facts: OnceLock::new(),
            cost: OnceLock::new(),
            warm: OnceBox::new(),
        }))
    }

    /// A flag in wire form (its key already read), compiled under
    /// `limits` on first use, with its counters inline (the SDK's cold
    /// start from its cache, whose warm-up compiles every flag).
    pub(super) fn lazy(key: Arc<str>, raw: Bytes, limits: Arc<Limits>) -> Cell {
        Cell::Hot(Arc::new(FlagCell {
            usage: FlagUsage::default(),
            key,
            raw,
            form: Form::Lazy { limits, compiled: OnceBox::new() },
            facts: OnceLock::new(),
            cost: OnceLock::new(),
        }))
    }

    /// The compiled flag, compiling it now if it is not yet.
    #[inline]
    pub(crate) fn get(&self) -> &CompiledFlag {
        match self {
            Cell::Hot(c) => c.get(),
            Cell::Cold(c) => &c.warm().flag,
        }
    }

    /// The compiled flag if it is compiled already.
    pub(super) fn get_now(&self) -> Option<&CompiledFlag> {
        match self {
            Cell::Hot(c) => c.get_now(),
            Cell::Cold(c) => c.warm.get().map(|w| &w.flag),
        }
    }

    /// The flag's usage counters (a [`ColdCell`]'s are made with its
    /// compiled form: asking compiles it).
    #[inline]
    pub(crate) fn usage(&self) -> &FlagUsage {
        match self {
            Cell::Hot(c) => &c.usage,
            Cell::Cold(c) => &c.warm().usage,
        }
    }

    /// The flag key, without compiling.
    pub(crate) fn key(&self) -> &str {
        self.key_arc()
    }

    fn key_arc(&self) -> &Arc<str> {
        match self {
            Cell::Hot(c) => &c.key,
            Cell::Cold(c) => &c.key,
        }
    }

    /// The flag's encoding.
    pub(super) fn raw(&self) -> &Bytes {
        match self {
            Cell::Hot(c) => &c.raw,
            Cell::Cold(c) => &c.raw,
        }
    }

    /// The flag's model, decoded from its bytes (see [`FlagCell::model`]).
    pub(super) fn model(&self) -> Flag {
        decode(self.key(), self.raw()).unwrap_or_else(|| Flag::placeholder(self.key()))
    }

    /// The flag's [`ItemCost`] (see [`FlagCell::cost`]).
    pub(super) fn cost(&self) -> ItemCost {
        match self {
            Cell::Hot(c) => c.cost(),
            Cell::Cold(c) => *c.cost.get_or_init(|| ItemCost::new(c.raw.len(), c.warm().flag.regex_bytes)),
        }
    }

    /// The cost as validation found it, if it did.
    #[cfg(test)]
    pub(super) fn cost_now(&self) -> Option<ItemCost> {
        match self {
            Cell::Hot(c) => c.cost.get().copied(),
            Cell::Cold(c) => c.cost.get().copied(),
        }
    }

    /// What is known of the flag without its model (see
    /// [`FlagCell::facts`]).
    pub(crate) fn facts(&self) -> &Facts {
        match self {
            Cell::Hot(c) => c.facts(),
            Cell::Cold(c) => c.facts.get_or_init(|| Facts::of(&self.model())),
        }
    }

    /// What the checks that cross items read of the flag.
    pub(super) fn links(&self) -> Links<'_> {
        Links::Held { key: self.key_arc(), facts: self.facts() }
    }
}

/// A flag of a snapshot that compiles on use: its key, bytes, facts and
/// cost, and once it is first evaluated its compiled form and usage
/// counters ([`Warm`], one allocation; racing readers may both compile, one
/// result is kept).
#[derive(Debug)]
pub(crate) struct ColdCell {
    key: Arc<str>,
    raw: Bytes,
    limits: Arc<Limits>,
    /// Set from the model when the cell is made (or read from the bytes
    /// once, for one made otherwise).
    facts: OnceLock<Facts>,
    cost: OnceLock<ItemCost>,
    warm: OnceBox<Warm>,
}

/// A [`ColdCell`]'s compiled form and counters.
#[derive(Debug)]
struct Warm {
    usage: FlagUsage,
    flag: CompiledFlag,
}

impl ColdCell {
    #[inline]
    fn warm(&self) -> &Warm {
        self.warm.get_or_init(|| self.compile())
    }

    #[cold]
    #[inline(never)]
    fn compile(&self) -> Box<Warm> {
        let (flag, facts) = compile_raw(&self.key, &self.raw, &self.limits);
        self.facts.get_or_init(|| facts);
        Box::new(Warm { usage: FlagUsage::default(), flag })
    }
}

/// One flag of a snapshot: its key and protobuf encoding, its [`Facts`],
/// and its evaluation form, compiled already or on first use. No model is
/// kept: a model is decoded from the bytes when a listener, an export or an
/// admin read asks for one ([`Cell::model`]), and the checks that cross
/// items read the facts ([`Cell::links`]), so a snapshot holds each flag
/// as its bytes and its compiled form, not also as a model (a snapshot that
/// compiles on use, the relay's, holds [`ColdCell`]s instead: the compiled
/// form only of the flags it evaluated, and no room kept for the others').
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
// `repr(C)`: the usage counters (192 bytes, aligned to a cache line) and
// then the compiled form, whose fields evaluation reads first then start on
// a cache line of their own (laid out by the compiler, they straddled two
// and evaluation was 5-10 % slower); what only writes, listings and admin
// reads touch comes last.
#[derive(Debug)]
#[repr(C)]
pub(crate) struct FlagCell {
    pub(crate) usage: FlagUsage,
    form: Form,
    key: Arc<str>,
    /// The flag's encoding (`flagstream.v1.Flag`): the bytes the stream
    /// and the cache carry, shared with whoever handed them in.
    raw: Bytes,
    /// Set with the cell for a flag written as a model (compiled now or on
    /// use); for one that arrived in wire form, when it is compiled or its
    /// facts are first asked for.
    facts: OnceLock<Facts>,
    /// What the flag adds to its environment's totals, kept so a change
    /// to the environment validates only what changed
    /// (`Snapshot::apply`); read from the compiled form on first need
    /// for a flag that was not validated here (one that arrived in wire
    /// form).
    pub(super) cost: OnceLock<ItemCost>,
}

// The compiled form inline: evaluation reaches it without another
// pointer to follow. A lazy cell leaves that space unused until it is
// compiled (into its own allocation): the cold start's cost, as before the
// bytes moved out of the variant.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Form {
    Compiled(CompiledFlag),
    Lazy { limits: Arc<Limits>, compiled: OnceBox<CompiledFlag> },
}

impl FlagCell {
    /// The flag's [`ItemCost`]: as validation found it, else from the
    /// compiled form (compiling the flag if it is still in wire form, as
    /// the warm-up does anyway): its regex bytes as compiling charged
    /// them, its encoded size the bytes'.
    pub(super) fn cost(&self) -> ItemCost {
        *self.cost.get_or_init(|| ItemCost::new(self.raw.len(), self.get().regex_bytes))
    }

    /// The compiled flag, compiling it now if it is still in wire form.
    #[inline]
    pub(crate) fn get(&self) -> &CompiledFlag {
        match &self.form {
            Form::Compiled(f) => f,
            Form::Lazy { limits, compiled } => compiled.get_or_init(|| {
                let (flag, facts) = compile_raw(&self.key, &self.raw, limits);
                // Facts first: whoever sees the compiled form sees them.
                self.facts.get_or_init(|| facts);
                Box::new(flag)
            }),
        }
    }

    /// The compiled flag if it is compiled already.
    pub(super) fn get_now(&self) -> Option<&CompiledFlag> {
        match &self.form {
            Form::Compiled(f) => Some(f),
            Form::Lazy { compiled, .. } => compiled.get(),
        }
    }

    /// The flag's model, decoded from its bytes; for bytes that do not
    /// decode (unvalidated data only), a flag with no variations, as the
    /// compiled form treats it (`MALFORMED_FLAG`).
    fn model(&self) -> Flag {
        decode(&self.key, &self.raw).unwrap_or_else(|| Flag::placeholder(&self.key))
    }

    /// What is known of the flag without its model: for a flag that arrived
    /// in wire form and is not compiled yet, read from its bytes once (a
    /// decode, not a compile).
    pub(crate) fn facts(&self) -> &Facts {
        self.facts.get_or_init(|| Facts::of(&self.model()))
    }
}

impl<H: HeadRoom> Slot<H> {
    /// The index entry of the flag in `cell`, at position `index`.
    pub(super) fn of(cell: &Cell, index: usize) -> Slot<H> {
        Slot {
            key: SmolStr::from(cell.key_arc().clone()),
            index: index as u32,
            cell: cell.clone(),
            head: H::of(cell),
        }
    }

    #[inline(always)]
    pub(super) fn found(&self) -> Found<'_> {
        Found { index: self.index, cell: &self.cell, head: self.head.get() }
    }
}

impl<H: HeadRoom> Keyed for Slot<H> {
    #[inline]
    fn key(&self) -> &str {
        &self.key
    }
}
