//! The limits an operator sets, as plain data at the bottom of the relay:
//! the quota settings (what the store, the token registry and the rate
//! limiters enforce), a listener's connection caps, and the client an
//! address counts for in per-address caps. Who enforces each is named on
//! it; this module enforces nothing and imports nothing of the relay.

use std::net::IpAddr;

/// The quota settings (relay options `quota-*`, `max-subscribes-per-sec`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaConfig {
    /// Most flags in one environment.
    pub flags: usize,
    /// Most segments in one environment.
    pub segments: usize,
    /// Most bytes of item encodings (≈ the snapshot) in one environment.
    pub snapshot_bytes: usize,
    /// Admin writes per second to one environment (bursts of twice that).
    pub writes_per_sec: u32,
    /// Admin writes per second by one admin token (bursts of twice that).
    pub token_writes_per_sec: u32,
    /// New subscriptions per second to one environment (bursts of twice).
    pub subscribes_per_sec: u32,
    /// New subscriptions per second to the whole relay (bursts of twice).
    pub relay_subscribes_per_sec: u32,
    /// Most SDK subscribers of one environment at once.
    pub subscribers: usize,
    /// Server-side evaluations (Admin `Evaluate`) per second by one admin
    /// token (bursts of twice that).
    pub token_evaluates_per_sec: u32,
    /// Most SDK keys of one environment, keys in a rotation's grace
    /// included (`quota-sdk-keys-per-env`).
    pub sdk_keys_per_env: usize,
    /// Most admin tokens of the relay (`quota-tokens`; with PostgreSQL, of
    /// the database).
    pub tokens: usize,
    /// Audit reads (`ListAudit` pages and `VerifyAudit` walks) per second
    /// by one admin token, bursts of twice that (`quota-audit-reads-per-sec`).
    pub audit_reads_per_sec: u32,
    /// Usage reads (`GetUsage` pages) per second by one admin token, bursts
    /// of twice that (`quota-usage-reads-per-sec`).
    pub usage_reads_per_sec: u32,
    /// Resident bytes the relay keeps within when it takes a write that
    /// grows an environment (`memory-budget`; 0: no budget).
    pub memory_budget: u64,
}

impl Default for QuotaConfig {
    fn default() -> QuotaConfig {
        QuotaConfig {
            flags: 20_000,
            segments: 2_000,
            snapshot_bytes: 64 << 20,
            writes_per_sec: 100,
            token_writes_per_sec: 100,
            subscribes_per_sec: 1_000,
            relay_subscribes_per_sec: 5_000,
            subscribers: 20_000,
            token_evaluates_per_sec: 200,
            sdk_keys_per_env: 100,
            tokens: 1_000,
            audit_reads_per_sec: 10,
            usage_reads_per_sec: 20,
            memory_budget: 0,
        }
    }
}

/// The size quotas the store checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SizeQuota {
    /// Most flags.
    pub flags: usize,
    /// Most segments.
    pub segments: usize,
    /// Most bytes of item encodings.
    pub snapshot_bytes: usize,
    /// Most SDK keys.
    pub sdk_keys: usize,
    /// The relay's memory budget, bytes (0: none).
    pub memory_budget: u64,
}

impl QuotaConfig {
    /// The part the store enforces.
    pub fn sizes(&self) -> SizeQuota {
        SizeQuota {
            flags: self.flags,
            segments: self.segments,
            snapshot_bytes: self.snapshot_bytes,
            sdk_keys: self.sdk_keys_per_env,
            memory_budget: self.memory_budget,
        }
    }
}

/// The connection caps of one listener (options `max-connections` and
/// `max-connections-per-address`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnCaps {
    /// Most open connections.
    pub total: usize,
    /// Most open connections from one client IP address.
    pub per_address: usize,
}

/// The client an address counts for: an IPv4 address, or the /64 network
/// of an IPv6 one (one host commonly holds a whole /64).
pub(crate) fn client_of(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(std::net::Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
        v4 => v4,
    }
}
