//! `status()` and `stats()` as JS objects: the client's state with its
//! failed attempts, and its counters.

use std::time::UNIX_EPOCH;

use flagstream::{Source, Status};
use napi_derive::napi;

/// One failed attempt to reach a relay.
#[napi(object)]
pub struct JsAttempt {
    pub endpoint: String,
    pub error: String,
    pub retry_in_ms: f64,
}

/// The client's status: `state` is `initializing`, `ready`, `stale` or
/// `failed`; the other fields as they apply.
#[napi(object)]
pub struct JsStatus {
    pub state: String,
    /// `stream`, `cache`, `file` or `test`.
    pub source: Option<String>,
    pub revision: Option<f64>,
    /// Since when (Unix ms).
    pub since: Option<f64>,
    pub reason: Option<String>,
    pub attempts: Option<Vec<JsAttempt>>,
}

pub(crate) fn source_name(s: Source) -> String {
    match s {
        Source::Stream => "stream",
        Source::Cache => "cache",
        Source::File => "file",
        Source::Test => "test",
    }
    .to_owned()
}

pub(crate) fn unix_ms(t: std::time::SystemTime) -> f64 {
    // A time before 1970 is not one the client records.
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_millis() as f64)
}

pub(crate) fn js_status(s: Status) -> JsStatus {
    let empty = |state: &str| JsStatus {
        state: state.to_owned(),
        source: None,
        revision: None,
        since: None,
        reason: None,
        attempts: None,
    };
    match s {
        Status::Initializing { attempts } => JsStatus {
            attempts: Some(
                attempts
                    .into_iter()
                    .map(|a| JsAttempt {
                        endpoint: a.endpoint,
                        error: a.error,
                        retry_in_ms: a.retry_in.as_millis() as f64,
                    })
                    .collect(),
            ),
            ..empty("initializing")
        },
        Status::Ready { source, revision, since } => JsStatus {
            source: Some(source_name(source)),
            revision: Some(revision as f64),
            since: Some(unix_ms(since)),
            ..empty("ready")
        },
        Status::Stale { source, revision, since, reason } => JsStatus {
            source: Some(source_name(source)),
            revision: Some(revision as f64),
            since: Some(unix_ms(since)),
            reason: Some(reason),
            ..empty("stale")
        },
        Status::Failed { reason } => JsStatus { reason: Some(reason), ..empty("failed") },
    }
}

/// The client's counters (`flagstream::Stats`, camelCase).
#[napi(object)]
pub struct JsStats {
    pub default_not_found: f64,
    pub default_not_ready: f64,
    pub default_wrong_type: f64,
    pub default_malformed: f64,
    pub connects: f64,
    pub reconnects: f64,
    pub endpoint_switches: f64,
    pub stalls: f64,
    pub resyncs: f64,
    pub checksum_mismatches: f64,
    pub diverged_heads: f64,
    pub retry_hints: f64,
    pub snapshots_applied: f64,
    pub deltas_applied: f64,
    pub cache_writes: f64,
    pub cache_errors: f64,
    pub stale_ms: f64,
}

pub(crate) fn js_stats(s: &flagstream::Stats) -> JsStats {
    JsStats {
        default_not_found: s.default_not_found as f64,
        default_not_ready: s.default_not_ready as f64,
        default_wrong_type: s.default_wrong_type as f64,
        default_malformed: s.default_malformed as f64,
        connects: s.connects as f64,
        reconnects: s.reconnects as f64,
        endpoint_switches: s.endpoint_switches as f64,
        stalls: s.stalls as f64,
        resyncs: s.resyncs as f64,
        checksum_mismatches: s.checksum_mismatches as f64,
        diverged_heads: s.diverged_heads as f64,
        retry_hints: s.retry_hints as f64,
        snapshots_applied: s.snapshots_applied as f64,
        deltas_applied: s.deltas_applied as f64,
        cache_writes: s.cache_writes as f64,
        cache_errors: s.cache_errors as f64,
        stale_ms: s.stale_ms as f64,
    }
}
