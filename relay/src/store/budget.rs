//! The memory budget (`memory-budget`): a write that grows an environment
//! is refused when the relay's resident memory, plus what other writes
//! being applied have set aside, plus what this write will hold while it
//! is applied, would pass the budget; else that much is set aside until
//! the write is published.
//!
//! What a write holds: [`WRITE_COPIES`] × the environment's new size (its
//! item bytes, models and compiled flags exist next to the old state's
//! until published) plus what processing its request adds
//! ([`TRANSIENT_PER_OP`] per op and [`TRANSIENT_PER_REQUEST_BYTE`] per
//! byte: decoding, planning, audit records, the storage transaction;
//! measured, below). It is checked twice: from the request alone before
//! the write is planned (so a write that cannot fit allocates nothing of
//! its plan), and with the environment's exact new size once planned.
//!
//! Fairness: an environment that holds more than its share of the data
//! (more than 1/N of all environments' item bytes, N environments) may
//! fill the budget only to [`OVER_SHARE_CEILING`]; the rest is kept for
//! the environments within their share, which are refused only at the
//! budget itself. So one tenant's growth stops before it takes every
//! tenant's writes. A write that does not grow its environment always
//! passes.

use std::sync::atomic::Ordering;

use super::op::Op;
use super::state::{Items, Kind};
use super::{Store, StoreError};

/// Copies of an environment a write holds until it is published
/// (RESILIENCE.md §5 has the measured heap profile).
pub(super) const WRITE_COPIES: u64 = 3;

/// Resident bytes a write's processing adds per op and per byte of its
/// request (the models, the plan, one audit record with its diff per op,
/// the storage transaction and sled's page cache, the allocator's slack).
/// Measured on the embedded store as the resident peak over the request's
/// bytes: 10,000 flags of 240 bytes (2.8 MB) 38–64×, 1,000 such flags
/// 44–58×, 100 flags of 40 KiB (4.1 MB) 6.9–7.7×, 10 flags of 400 KB
/// 4.8–5.2×: ~16 KiB per op plus ~7× the bytes.
pub(super) const TRANSIENT_PER_OP: u64 = 16 << 10;
/// See [`TRANSIENT_PER_OP`].
pub(super) const TRANSIENT_PER_REQUEST_BYTE: u64 = 8;

/// How much of the budget an environment over its fair share may fill:
/// `(numerator, denominator)`.
pub(super) const OVER_SHARE_CEILING: (u64, u64) = (3, 4);

/// When the budget is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stage {
    /// Before planning: the new size estimated from the request.
    Request,
    /// Planned: the new size known.
    Planned,
}

/// Memory the budget set aside for one write until it is published (or
/// fails): released when dropped.
#[derive(Debug)]
pub(super) struct Reserved {
    store: Store,
    bytes: u64,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.store.inner.budget_reserved.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// What a write's request brings: the encoded size of the items its ops
/// carry, how much it is estimated to grow the environment, and the
/// resident bytes processing it is estimated to add.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request {
    pub(super) bytes: u64,
    /// Estimated growth of the environment's item bytes: a put's encoding
    /// over the stored item's, a patch's own size (an upper bound), a
    /// delete's stored item taken off. At most 0: the write does not grow
    /// the environment and is not checked.
    pub(super) growth: i64,
    pub(super) transient: u64,
}

impl Request {
    /// The request of `ops` against the environment's `items`. One item at
    /// a time, so the estimate allocates nothing that lives.
    pub(super) fn of(ops: &[Op], items: &Items) -> Request {
        use prost::Message;
        let stored =
            |kind: Kind, key: &str| items.get(&(kind, key.to_owned())).map_or(0, |i| i.bytes.len()) as i64;
        let (mut bytes, mut growth) = (0u64, 0i64);
        for op in ops {
            let (carried, grows) = match op {
                Op::PutFlag { flag, .. } => {
                    let n = flagstream::wire::flag_to_proto(flag).encoded_len();
                    (n, n as i64 - stored(Kind::Flag, &flag.key))
                }
                Op::PutSegment { segment, .. } => {
                    let n = flagstream::wire::segment_to_proto(segment).encoded_len();
                    (n, n as i64 - stored(Kind::Segment, &segment.key))
                }
                Op::PatchFlag { patches, .. } => {
                    let n = patches.iter().map(Message::encoded_len).sum::<usize>();
                    (n, n as i64)
                }
                Op::PatchSegment { patches, .. } => {
                    let n = patches.iter().map(Message::encoded_len).sum::<usize>();
                    (n, n as i64)
                }
                Op::DeleteFlag { key, .. } => (key.len(), -stored(Kind::Flag, key)),
                Op::DeleteSegment { key, .. } => (key.len(), -stored(Kind::Segment, key)),
            };
            bytes += carried as u64;
            growth += grows;
        }
        let transient = TRANSIENT_PER_OP
            .saturating_mul(ops.len() as u64)
            .saturating_add(TRANSIENT_PER_REQUEST_BYTE.saturating_mul(bytes));
        Request { bytes, growth, transient }
    }
}

/// The verdict's figures, for the refusal.
struct Figures {
    resident: u64,
    reserved: u64,
    need: u64,
    transient: u64,
    limit: u64,
    over_share: Option<u64>,
}

impl Store {
    /// Checks the memory budget for a write taking `env` from `before` to
    /// `after` item bytes with `request`. At
    /// [`Stage::Request`] nothing is set aside; at [`Stage::Planned`] the
    /// write's share is, until the returned guard drops.
    pub(super) fn check_memory_budget(
        &self,
        env: &str,
        before: u64,
        after: u64,
        request: Request,
        stage: Stage,
    ) -> Result<Option<Reserved>, StoreError> {
        let budget = self.inner.size_quota.load().memory_budget;
        if budget == 0 || after <= before {
            return Ok(None);
        }
        let (environments, others) = {
            let envs = self.inner.envs.load();
            let others: u64 = envs
                .iter()
                .filter(|(name, _)| name.as_str() != env)
                .map(|(_, e)| e.state.load().item_bytes() as u64)
                .sum();
            (envs.len().max(1) as u64, others)
        };
        let total = others.saturating_add(after);
        let held = WRITE_COPIES.saturating_mul(after);
        let transient = request.transient;
        let need = held.saturating_add(transient);
        let over_share =
            (environments > 1 && after.saturating_mul(environments) > total).then_some(total / environments);
        let limit = match over_share {
            Some(_) => budget / OVER_SHARE_CEILING.1 * OVER_SHARE_CEILING.0,
            None => budget,
        };
        let resident = crate::ops::process::resident_bytes();
        let set_aside = &self.inner.budget_reserved;
        let mut reserved = set_aside.load(Ordering::Relaxed);
        loop {
            let projected = resident.saturating_add(reserved).saturating_add(need);
            if projected > limit {
                let f = Figures { resident, reserved, need, transient, limit, over_share };
                return Err(self.refuse(
                    env,
                    after,
                    request.bytes,
                    projected,
                    budget,
                    environments,
                    f,
                    stage,
                ));
            }
            if stage == Stage::Request {
                return Ok(None);
            }
            match set_aside.compare_exchange(reserved, reserved + need, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return Ok(Some(Reserved { store: self.clone(), bytes: need })),
                Err(now) => reserved = now,
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn refuse(
        &self,
        env: &str,
        env_bytes: u64,
        request_bytes: u64,
        projected: u64,
        budget: u64,
        environments: u64,
        f: Figures,
        stage: Stage,
    ) -> StoreError {
        self.inner.metrics.limit_hit("memory_budget");
        if f.over_share.is_some() {
            self.inner.metrics.quota_refusal(env, "memory_share");
        }
        let e = StoreError::MemoryBudget(Box::new(super::error::BudgetRefusal {
            env: env.to_owned(),
            env_bytes,
            estimated: stage == Stage::Request,
            resident: f.resident,
            reserved: f.reserved,
            copies: WRITE_COPIES,
            request_bytes,
            transient: f.transient,
            projected,
            budget,
            limit: f.limit,
            fair_share: f.over_share,
            environments,
        }));
        debug_assert!(f.need >= f.transient);
        tracing::warn!(error = %e, "write refused by the memory budget");
        e
    }
}
