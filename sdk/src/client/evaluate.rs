//! Typed evaluation through a [`Client`]: every typed method takes one path
//! — readiness, one lock-free load of the snapshot, fallback counting and
//! the stale mark — and the owned result form, [`EvaluationDetail`], which
//! carries names as [`Name`]s so building it never allocates.

use std::borrow::Cow;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value as Json;

use super::handle::Client;
use flagstream_core::{Context, Detail, ErrorKind, FlagHandle, FromValue, Name, Reason, Snapshot};

/// An evaluation result that owns its data (see [`Client::detail`]).
/// Building one allocates nothing beyond what its value owns (a `String`
/// or JSON value): names are [`Name`]s, inline or shared with the snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct EvaluationDetail<T> {
    /// The value (the caller's default on error).
    pub value: T,
    /// The served variation; `None` when the default was returned.
    pub variation: Option<u32>,
    /// Reason kind: `OFF`, `TARGET_MATCH`, `RULE_MATCH`, `FALLTHROUGH`,
    /// `PREREQUISITE_FAILED` or `ERROR`.
    pub reason: &'static str,
    /// For `RULE_MATCH`: the rule index.
    pub rule_index: Option<u32>,
    /// For `RULE_MATCH`: the rule id (if it has one).
    pub rule_id: Option<Name>,
    /// For `PREREQUISITE_FAILED`: the prerequisite.
    pub prerequisite_key: Option<Name>,
    /// For `ERROR`: what went wrong.
    pub error: Option<ErrorKind>,
    /// The flag's version.
    pub flag_version: u64,
    /// The snapshot revision.
    pub revision: u64,
    /// Whether the data was stale.
    pub stale: bool,
    /// Whether a percentage rollout or a schedule chose the variation: for
    /// `FALLTHROUGH` either; for `RULE_MATCH` only a schedule (the reason
    /// does not say whether a rule's rollout chose).
    pub in_rollout: bool,
    /// For a schedule: its current step, 1-based (0 before the first step).
    pub schedule_step: Option<u32>,
}

impl Client {
    /// Runs `f` on the snapshot every evaluation reads, or on `None`
    /// before the first data (counted as a `NOT_READY` fallback). `ready`
    /// first: publish stores the cell before setting it, so a reader that
    /// sees it set also sees the published snapshot.
    #[inline(always)]
    fn read<R>(&self, f: impl FnOnce(Option<&Snapshot>) -> R) -> R {
        if self.shared.ready.load(Ordering::Acquire) {
            f(Some(&self.shared.cell.load()))
        } else {
            self.shared.counters.fallback(ErrorKind::NotReady);
            f(None)
        }
    }

    /// What every evaluation does with its result: counts a fallback (and
    /// a missing flag's in the usage summary: flags in the snapshot count
    /// their own) and marks stale data.
    #[inline(always)]
    fn settle<'s, T: FromValue<'s>>(&self, key: &str, d: &mut Detail<'s, T>) {
        if let Reason::Error(kind) = d.reason {
            self.shared.counters.fallback(kind);
            if kind == ErrorKind::FlagNotFound {
                self.absent(key, kind, &d.value);
            }
        }
        d.stale = self.shared.stale.load(Ordering::Relaxed);
    }

    /// Counts a fallback for a key without usage counters (not in the
    /// data, or no data yet) in the usage summary.
    #[inline(always)]
    fn absent<'s, T: FromValue<'s>>(&self, key: &str, kind: ErrorKind, default: &T) {
        if self.shared.usage.on() {
            self.shared.usage.absent(key, kind, default);
        }
    }

    /// The snapshot evaluations read, or `None` before the first data
    /// (nothing counted: see [`Client::not_ready`]). With [`Client::eval_in`]
    /// and [`Client::eval_handle_in`], the parts of an evaluation for a
    /// binding that needs the borrowed result of any type (the C ABI).
    #[inline]
    pub fn loaded(&self) -> Option<impl Deref<Target = Arc<Snapshot>>> {
        self.shared.ready.load(Ordering::Acquire).then(|| self.shared.cell.load())
    }

    /// The result before any data (the default, `ERROR`/`NOT_READY`),
    /// counted as that fallback and in the usage summary.
    pub fn not_ready<'d, T: FromValue<'d>>(&self, key: &str, default: T) -> Detail<'d, T> {
        self.shared.counters.fallback(ErrorKind::NotReady);
        self.absent(key, ErrorKind::NotReady, &default);
        not_ready_detail(default)
    }

    /// One evaluation through a pre-resolved [`FlagHandle`] in `snap` (from
    /// [`Client::loaded`]): counted, marked stale and (with usage reports
    /// on) counted in the usage summary like [`Client::eval_in`].
    #[inline]
    pub fn eval_handle_in<'s, T: FromValue<'s>>(
        &self,
        snap: &'s Snapshot,
        handle: &FlagHandle,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        let mut d = match self.shared.usage.on() {
            true => handle.detail_counted(snap, ctx, default),
            false => handle.detail(snap, ctx, default),
        };
        self.settle(handle.key(), &mut d);
        d
    }

    /// One typed evaluation in `snap` (from [`Client::loaded`]): counted,
    /// marked stale, and counted in the usage summary when usage reports
    /// are on.
    #[inline(always)]
    pub fn eval_in<'s, T: FromValue<'s>>(
        &self,
        snap: &'s Snapshot,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> Detail<'s, T> {
        let mut d = match self.shared.usage.on() {
            true => snap.detail_counted(key, ctx, default),
            false => snap.detail(key, ctx, default),
        };
        self.settle(key, &mut d);
        d
    }

    /// [`Client::eval_in`] with the name its reason borrows.
    #[inline(always)]
    fn eval_named<'s, T: FromValue<'s>>(
        &self,
        snap: &'s Snapshot,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> (Detail<'s, T>, Option<Name>) {
        let (mut d, name) = match self.shared.usage.on() {
            true => snap.detail_named_counted(key, ctx, default),
            false => snap.detail_named(key, ctx, default),
        };
        self.settle(key, &mut d);
        (d, name)
    }

    /// Evaluates a flag as `T`; counts fallbacks. The closure sees the
    /// borrowed result (no allocation) while the snapshot is held.
    #[inline]
    pub fn with_detail<'a, T, R>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
        f: impl FnOnce(Detail<'_, T>) -> R,
    ) -> R
    where
        T: for<'s> FromValue<'s> + 'a,
    {
        self.read(|snap| match snap {
            Some(snap) => f(self.eval_in(snap, key, ctx, default)),
            None => {
                self.absent(key, ErrorKind::NotReady, &default);
                f(not_ready_detail(default))
            }
        })
    }

    /// A bool flag's value, or `default`. No I/O, no lock, no allocation.
    #[inline]
    pub fn bool(&self, key: &str, ctx: &Context<'_>, default: bool) -> bool {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// An int flag's value, or `default`.
    #[inline]
    pub fn int(&self, key: &str, ctx: &Context<'_>, default: i64) -> i64 {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// A float (or int) flag's value, or `default`.
    #[inline]
    pub fn float(&self, key: &str, ctx: &Context<'_>, default: f64) -> f64 {
        self.with_detail(key, ctx, default, |d| d.value)
    }

    /// A string flag's value, or `default`. Copies the string; use
    /// [`Client::string_with`] to borrow it without allocating.
    pub fn string(&self, key: &str, ctx: &Context<'_>, default: &str) -> String {
        self.string_with(key, ctx, default, str::to_owned)
    }

    /// A string flag's value, borrowed for the duration of `f`.
    pub fn string_with<R>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: &str,
        f: impl FnOnce(&str) -> R,
    ) -> R {
        self.read(|snap| match snap {
            Some(snap) => f(self.eval_in(snap, key, ctx, default).value),
            None => {
                self.absent(key, ErrorKind::NotReady, &default);
                f(default)
            }
        })
    }

    /// Any flag's value as JSON, or `default`.
    pub fn json(&self, key: &str, ctx: &Context<'_>, default: Json) -> Json {
        self.json_detail(key, ctx, default).value
    }

    /// Typed evaluation with an owned result. Allocation-free for bool,
    /// int and float flags (names are [`Name`]s).
    pub fn detail<T: for<'s> FromValue<'s>>(
        &self,
        key: &str,
        ctx: &Context<'_>,
        default: T,
    ) -> EvaluationDetail<T> {
        self.read(|snap| match snap {
            Some(snap) => {
                let (d, name) = self.eval_named(snap, key, ctx, default);
                owned(d, name, |v| v)
            }
            None => {
                self.absent(key, ErrorKind::NotReady, &default);
                owned(not_ready_detail(default), None, |v| v)
            }
        })
    }

    /// [`Client::bool`] with the full result.
    pub fn bool_detail(&self, key: &str, ctx: &Context<'_>, default: bool) -> EvaluationDetail<bool> {
        self.detail(key, ctx, default)
    }

    /// [`Client::int`] with the full result.
    pub fn int_detail(&self, key: &str, ctx: &Context<'_>, default: i64) -> EvaluationDetail<i64> {
        self.detail(key, ctx, default)
    }

    /// [`Client::float`] with the full result.
    pub fn float_detail(&self, key: &str, ctx: &Context<'_>, default: f64) -> EvaluationDetail<f64> {
        self.detail(key, ctx, default)
    }

    /// [`Client::string`] with the full result (the value is copied).
    pub fn string_detail(&self, key: &str, ctx: &Context<'_>, default: &str) -> EvaluationDetail<String> {
        self.read(|snap| match snap {
            Some(snap) => {
                let (d, name) = self.eval_named(snap, key, ctx, default);
                owned(d, name, str::to_owned)
            }
            None => {
                self.absent(key, ErrorKind::NotReady, &default);
                owned(not_ready_detail(default), None, str::to_owned)
            }
        })
    }

    /// [`Client::json`] with the full result (the value is copied).
    pub fn json_detail(&self, key: &str, ctx: &Context<'_>, default: Json) -> EvaluationDetail<Json> {
        self.read(|snap| match snap {
            Some(snap) => {
                let (d, name) = self.eval_named(snap, key, ctx, Cow::Owned(default));
                owned(d, name, Cow::into_owned)
            }
            None => {
                self.absent(key, ErrorKind::NotReady, &Cow::Borrowed(&default));
                owned(not_ready_detail(default), None, |v| v)
            }
        })
    }

    /// A bool flag's value through a pre-resolved [`FlagHandle`], or
    /// `default`; counts fallbacks like [`Client::bool`]. The handle skips
    /// the key lookup, and for a flag whose answer does not depend on the
    /// context (off, or a fixed fallthrough) even the snapshot load. For a
    /// typed result use [`FlagHandle::detail`] on [`Client::snapshot`].
    #[inline]
    pub fn handle_bool(&self, handle: &FlagHandle, ctx: &Context<'_>, default: bool) -> bool {
        if !self.shared.ready.load(Ordering::Acquire) {
            self.shared.counters.fallback(ErrorKind::NotReady);
            self.absent(handle.key(), ErrorKind::NotReady, &default);
            return default;
        }
        let usage = &self.shared.usage;
        if usage.on() {
            // The constant shortcut, counted in the handle; else counted
            // through the snapshot, and the shortcut prepared for the next
            // call (the handle adopted by this client on its first).
            if let Some(value) = handle.bool_shortcut_counted(&self.shared.cell, usage.id(), default) {
                return value;
            }
            let snap = self.shared.cell.load();
            let mut d = handle.detail_counted(&snap, ctx, default);
            handle.remember_constant(&snap, &d);
            if !handle.usage_adopted() {
                usage.adopt(handle);
            }
            self.settle(handle.key(), &mut d);
            return d.value;
        }
        let (value, error) = handle.bool_checked(&self.shared.cell, ctx, default);
        if let Some(kind) = error {
            self.shared.counters.fallback(kind);
        }
        value
    }
}

/// The result before any data: the default, reason `ERROR` (`NOT_READY`).
fn not_ready_detail<T>(value: T) -> Detail<'static, T> {
    Detail {
        value,
        variation: None,
        reason: Reason::Error(ErrorKind::NotReady),
        flag_version: 0,
        revision: 0,
        stale: false,
    }
}

/// The owned form of `d`, with the name its reason borrows.
/// (The reason's parts come from [`Reason::parts`], the one flattening;
/// `name` is the rule id or prerequisite key as an owned `Name`.)
fn owned<S, T>(d: Detail<'_, S>, name: Option<Name>, f: impl FnOnce(S) -> T) -> EvaluationDetail<T> {
    let p = d.reason.parts();
    EvaluationDetail {
        value: f(d.value),
        variation: d.variation,
        reason: d.reason.kind_name(),
        rule_index: p.rule_index,
        rule_id: p.rule_id.and(name.clone()),
        prerequisite_key: p.prerequisite_key.and(name),
        error: p.error,
        flag_version: d.flag_version,
        revision: d.revision,
        stale: d.stale,
        in_rollout: p.in_rollout,
        schedule_step: p.schedule_step,
    }
}
