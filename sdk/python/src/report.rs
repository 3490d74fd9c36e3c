//! `status()` and `stats()` as Python dicts: the client's state (with the
//! sync restarting after a fork shown as stale, serving the parent's
//! flags), its failed attempts, and its counters (a fixed snapshot's
//! fallbacks added to those of the sync, if any).

use std::time::{SystemTime, UNIX_EPOCH};

use flagstream::{Source, Status};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use flagstream_binding::{Live, Serving};

pub(crate) fn status<'py>(py: Python<'py>, live: &Live) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    let serving_revision = match &live.serving {
        Serving::Client(c) => c.snapshot().revision(),
        Serving::Fixed { snap, .. } => snap.as_ref().map_or(0, |s| s.revision()),
    };
    if live.closed {
        out.set_item("state", "closed")?;
        out.set_item("revision", serving_revision)?;
        return Ok(out);
    }
    let status = match live.syncing() {
        Some(c) => c.status(),
        None => Status::Ready { source: Source::Test, revision: serving_revision, since: SystemTime::now() },
    };
    let status = match (&live.pending, status) {
        // After a fork, until the new sync has data: the snapshot the
        // parent had is served, marked stale.
        (Some(_), Status::Initializing { attempts }) => {
            out.set_item("attempts", attempts_list(py, &attempts)?)?;
            Status::Stale {
                source: Source::Cache,
                revision: serving_revision,
                since: SystemTime::now(),
                reason: "restarting the sync after a fork; serving the parent's flags".into(),
            }
        }
        (_, s) => s,
    };
    match status {
        Status::Initializing { attempts } => {
            out.set_item("state", "initializing")?;
            out.set_item("attempts", attempts_list(py, &attempts)?)?;
        }
        Status::Ready { source, revision, since } => {
            out.set_item("state", "ready")?;
            out.set_item("source", source_name(source))?;
            out.set_item("revision", revision)?;
            out.set_item("since", unix_s(since))?;
        }
        Status::Stale { source, revision, since, reason } => {
            out.set_item("state", "stale")?;
            out.set_item("source", source_name(source))?;
            out.set_item("revision", revision)?;
            out.set_item("since", unix_s(since))?;
            out.set_item("reason", reason)?;
        }
        Status::Failed { reason } => {
            out.set_item("state", "failed")?;
            out.set_item("reason", reason)?;
        }
    }
    Ok(out)
}

pub(crate) fn stats<'py>(py: Python<'py>, live: &Live) -> PyResult<Bound<'py, PyDict>> {
    let s = live.stats();
    let out = PyDict::new(py);
    for (k, v) in [
        ("default_not_found", s.default_not_found),
        ("default_not_ready", s.default_not_ready),
        ("default_wrong_type", s.default_wrong_type),
        ("default_malformed", s.default_malformed),
        ("connects", s.connects),
        ("reconnects", s.reconnects),
        ("endpoint_switches", s.endpoint_switches),
        ("stalls", s.stalls),
        ("resyncs", s.resyncs),
        ("checksum_mismatches", s.checksum_mismatches),
        ("diverged_heads", s.diverged_heads),
        ("retry_hints", s.retry_hints),
        ("snapshots_applied", s.snapshots_applied),
        ("deltas_applied", s.deltas_applied),
        ("cache_writes", s.cache_writes),
        ("cache_errors", s.cache_errors),
        ("stale_ms", s.stale_ms),
    ] {
        out.set_item(k, v)?;
    }
    Ok(out)
}

fn unix_s(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

fn source_name(s: Source) -> &'static str {
    match s {
        Source::Stream => "stream",
        Source::Cache => "cache",
        Source::File => "file",
        Source::Test => "test",
    }
}

/// Failed attempts as a list of dicts (endpoint, error, retry_in seconds).
fn attempts_list<'py>(py: Python<'py>, attempts: &[flagstream::Attempt]) -> PyResult<Bound<'py, PyList>> {
    let list = PyList::empty(py);
    for a in attempts {
        let d = PyDict::new(py);
        d.set_item("endpoint", &a.endpoint)?;
        d.set_item("error", &a.error)?;
        d.set_item("retry_in", a.retry_in.as_secs_f64())?;
        list.append(d)?;
    }
    Ok(list)
}
