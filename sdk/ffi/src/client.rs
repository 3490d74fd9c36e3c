//! The client's life: made from JSON options, waited for, closed, freed;
//! its status.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use flagstream::{Client, FlagSet};
use serde::Deserialize;

use crate::*;

/// The client: a streaming client (or a test-data or file one) and whether
/// it was closed.
pub struct FlagstreamClient {
    pub(crate) client: Client,
    pub(crate) closed: AtomicBool,
    /// Change listeners by id: each a task of the library's runtime.
    pub(crate) listeners: std::sync::Mutex<std::collections::HashMap<u64, Listener>>,
    pub(crate) next_listener: std::sync::atomic::AtomicU64,
}

/// The client's options, as JSON (unknown keys are refused, naming them).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Options {
    /// Relay URLs, in order of preference.
    #[serde(default)]
    endpoints: Vec<String>,
    /// The environment's SDK key.
    sdk_key: Option<String>,
    /// Directory of the last-known-good cache.
    cache_dir: Option<String>,
    /// Flags served as they are, no relay: a flag set as YAML or JSON.
    test_data: Option<String>,
    /// Flags read from this file, no relay.
    offline_file: Option<String>,
    /// Send usage summaries to the relay (default on).
    usage_reports: Option<bool>,
}

/// Makes a client from `options` (JSON: `endpoints`, `sdk_key`,
/// `cache_dir`, `test_data`, `offline_file`, `usage_reports`); `*out` is
/// the new handle, freed with [`flagstream_client_free`].
///
/// # Safety
/// `options` points to `len` readable bytes; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_new(
    options: *const u8,
    len: usize,
    out: *mut *mut FlagstreamClient,
) -> FlagstreamStatus {
    guard(|| {
        if out.is_null() {
            return Err(invalid("out: a null out pointer"));
        }
        // SAFETY: the caller's contract, above.
        let json = unsafe { text(options, len, "options") }?;
        let o: Options = serde_json::from_str(json).map_err(|e| invalid(format!("options: {e}")))?;
        let mut b = Client::builder().endpoints(o.endpoints);
        if let Some(key) = o.sdk_key {
            b = b.sdk_key(key);
        }
        if let Some(dir) = o.cache_dir {
            b = b.cache_dir(dir);
        }
        if let Some(flags) = o.test_data {
            let set: FlagSet =
                serde_yaml_ng::from_str(&flags).map_err(|e| invalid(format!("options.test_data: {e}")))?;
            b = b.test_data(set);
        }
        if let Some(path) = o.offline_file {
            b = b.offline_file(path);
        }
        if let Some(on) = o.usage_reports {
            b = b.usage_reports(on);
        }
        let rt = runtime().map_err(|e| Failure(FlagstreamStatus::Internal, e))?;
        let _entered = rt.enter();
        let client = b.build().map_err(|e| invalid(format!("options: {e}")))?;
        let boxed = Box::new(FlagstreamClient {
            client,
            closed: AtomicBool::new(false),
            listeners: std::sync::Mutex::default(),
            next_listener: std::sync::atomic::AtomicU64::new(1),
        });
        // SAFETY: the caller's contract, above.
        unsafe { put(out, Box::into_raw(boxed), "out") }
    })
}

/// The client, unless it was closed.
///
/// # Safety
/// `c` is null or a live client handle.
pub(crate) unsafe fn open<'a>(c: *const FlagstreamClient) -> Result<&'a FlagstreamClient, Failure> {
    // SAFETY: the caller's contract, above.
    let c = unsafe { handle(c, "client") }?;
    if c.closed.load(Ordering::Acquire) {
        return Err(Failure(FlagstreamStatus::Closed, "the client was closed".into()));
    }
    Ok(c)
}

/// Waits up to `timeout_ms` for the client's first data: `OK` with data,
/// `TIMEOUT` without (it keeps trying in the background).
///
/// # Safety
/// `client` is a live client handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_wait_ready(
    client: *const FlagstreamClient,
    timeout_ms: u64,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let c = unsafe { open(client) }?.client.clone();
        let status = wait_on(async move { c.wait_ready(Duration::from_millis(timeout_ms)).await })?;
        if status.has_data() {
            Ok(())
        } else {
            Err(Failure(FlagstreamStatus::Timeout, format!("no data within {timeout_ms} ms: {status:?}")))
        }
    })
}

/// Closes the client: its last usage counts are sent (waiting up to
/// `timeout_ms`), its stream ends; later calls on it return `CLOSED`.
/// The handle stays valid until [`flagstream_client_free`].
///
/// # Safety
/// `client` is a live client handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_close(
    client: *const FlagstreamClient,
    timeout_ms: u64,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let c = unsafe { open(client) }?;
        close(c, Duration::from_millis(timeout_ms))
    })
}

/// Closes `c` once (whoever closes it first; later closes get `CLOSED`).
pub(crate) fn close(c: &FlagstreamClient, timeout: Duration) -> Result<(), Failure> {
    if c.closed.swap(true, Ordering::AcqRel) {
        return Err(Failure(FlagstreamStatus::Closed, "the client was closed".into()));
    }
    let client = c.client.clone();
    wait_on(async move { client.close(timeout).await })?;
    let all: Vec<Listener> =
        c.listeners.lock().unwrap_or_else(|p| p.into_inner()).drain().map(|(_, l)| l).collect();
    for l in all {
        stop_listener(l)?;
    }
    Ok(())
}

/// How long freeing an unclosed client waits for its last usage counts.
pub(crate) const FREE_CLOSE: Duration = Duration::from_secs(2);

/// Frees a client, closing it first if it was not (waiting up to 2 s for
/// its last usage counts). Null is ignored.
///
/// # Safety
/// `client` is null or a live client handle, not used after this call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_free(client: *mut FlagstreamClient) {
    if client.is_null() {
        return;
    }
    // A panic here has no status to return: it is caught and dropped.
    let _freed = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: made by `Box::into_raw` in `flagstream_client_new`, and
        // not used after this call (the caller's contract).
        let c = unsafe { Box::from_raw(client) };
        // Already closed, or the close failed: nothing more to send.
        let _closed = close(&c, FREE_CLOSE);
        drop(c);
    }));
}

/// The client's state: 0 initializing (no data yet), 1 ready, 2 stale
/// (serving data that may be out of date), 3 failed (a permanent error,
/// e.g. a revoked key); `*revision` is the data's revision (0 without).
///
/// # Safety
/// `client` is a live client handle; `state` and `revision` are valid for
/// writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_status(
    client: *const FlagstreamClient,
    state: *mut u32,
    revision: *mut u64,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let c = unsafe { open(client) }?;
        let (code, rev) = match c.client.status() {
            flagstream::Status::Initializing { .. } => (0, 0),
            flagstream::Status::Ready { revision, .. } => (1, revision),
            flagstream::Status::Stale { revision, .. } => (2, revision),
            flagstream::Status::Failed { .. } => (3, 0),
        };
        // SAFETY: the caller's contract, above.
        unsafe { put(state, code, "state").and_then(|()| put(revision, rev, "revision")) }
    })
}
