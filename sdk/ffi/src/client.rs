//! The client's life: made from JSON options, waited for, closed, freed;
//! its status.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::Guard;
use flagstream::{Builder, Client, FlagSet, Limits, Snapshot};
use flagstream_binding::{Engine, ForkMutex, Live, Serving};
use serde::Deserialize;

use crate::*;

/// The client: what it serves (a streaming client, test data or a flag
/// file; in a forked child, the parent's data until its own sync has
/// some) and its change listeners.
pub struct FlagstreamClient {
    pub(crate) engine: Engine,
    /// Change listeners by id: each a task of the library's runtime;
    /// `None` once the client is closed (a listener added meanwhile is
    /// refused under this lock, so none outlives the close).
    pub(crate) listeners: ForkMutex<Option<std::collections::HashMap<u64, Listener>>>,
    pub(crate) next_listener: std::sync::atomic::AtomicU64,
}

/// The client's options, as JSON (unknown keys are refused, naming them).
/// Durations are seconds (numbers), as in the Python package.
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
    /// With `test_data`: `false` serves the flags without validating them
    /// (a malformed flag evaluates to `MALFORMED_FLAG`).
    validate: Option<bool>,
    /// Flags read from this file, no relay.
    offline_file: Option<String>,
    /// Send usage summaries to the relay (default on).
    usage_reports: Option<bool>,
    connect_timeout: Option<f64>,
    keepalive_interval: Option<f64>,
    keepalive_timeout: Option<f64>,
    tcp_user_timeout: Option<f64>,
    first_message_timeout: Option<f64>,
    heartbeat_default: Option<f64>,
    backoff_base: Option<f64>,
    backoff_cap: Option<f64>,
    healthy_after: Option<f64>,
    stall_jitter: Option<f64>,
    stale_after: Option<f64>,
    cache_write_interval: Option<f64>,
    usage_interval: Option<f64>,
    watchdog_misses: Option<u32>,
    keep_endpoint_order: Option<bool>,
    /// PEM of the CA that signs the relays' certificates.
    tls_ca_pem: Option<String>,
    /// `[certificate PEM, key PEM]` of the client's own identity (mTLS).
    tls_identity_pem: Option<(String, String)>,
}

/// `secs` seconds as a duration, or an error naming `name`.
fn secs(name: &str, secs: f64) -> Result<Duration, Failure> {
    Duration::try_from_secs_f64(secs).map_err(|e| invalid(format!("options.{name}: {secs} s: {e}")))
}

impl Options {
    /// The builder these options describe (streaming options only).
    fn builder(&self) -> Result<Builder, Failure> {
        let mut b = Client::builder().endpoints(self.endpoints.clone());
        if let Some(key) = &self.sdk_key {
            b = b.sdk_key(key.clone());
        }
        macro_rules! durations {
            ($($name:ident),*) => {$(
                if let Some(v) = self.$name {
                    b = b.$name(secs(stringify!($name), v)?);
                }
            )*};
        }
        durations!(
            connect_timeout,
            keepalive_interval,
            keepalive_timeout,
            tcp_user_timeout,
            first_message_timeout,
            heartbeat_default,
            backoff_base,
            backoff_cap,
            healthy_after,
            stall_jitter,
            stale_after,
            cache_write_interval,
            usage_interval
        );
        if let Some(n) = self.watchdog_misses {
            b = b.watchdog_misses(n);
        }
        if self.keep_endpoint_order == Some(true) {
            b = b.keep_endpoint_order();
        }
        if let Some(on) = self.usage_reports {
            b = b.usage_reports(on);
        }
        if let Some(pem) = &self.tls_ca_pem {
            b = b.tls_ca_pem(pem.clone().into_bytes());
        }
        if let Some((cert, key)) = &self.tls_identity_pem {
            b = b.tls_identity_pem(cert.clone().into_bytes(), key.clone().into_bytes());
        }
        Ok(b)
    }
}

/// A build error with every cause, as the message of `INVALID_ARGUMENT`,
/// naming the option (not the Rust builder's method).
fn build_error(e: flagstream::BuildError) -> Failure {
    use flagstream::BuildError as E;
    let mut msg = match &e {
        E::NoEndpoints => {
            "options.endpoints: at least one relay URL (or options.test_data or options.offline_file)".into()
        }
        E::NoSdkKey => "options.sdk_key: required to stream from a relay".into(),
        E::BadEndpoint(url) => format!("options.endpoints: {url:?} is not an http:// or https:// URL"),
        E::Config(what) => format!("options: {what}"),
        other => format!("options: {other}"),
    };
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    invalid(msg)
}

/// What `options` serve, and the builder to restart a relay's sync with
/// after a fork.
fn serving(o: Options) -> Result<(Serving, Option<Builder>), Failure> {
    let rt = runtime()?;
    let _entered = rt.enter();
    if let Some(flags) = &o.test_data {
        let set: FlagSet =
            serde_yaml_ng::from_str(flags).map_err(|e| invalid(format!("options.test_data: {e}")))?;
        if o.validate == Some(false) {
            let snap = Snapshot::compile_unvalidated(&set, &Limits::default());
            return Ok((Serving::fixed(Some(Arc::new(snap)), false), None));
        }
        let c = Builder::default().test_data(set).build().map_err(build_error)?;
        return Ok((Serving::Client(c), None));
    }
    if o.validate.is_some() {
        return Err(invalid("options.validate: only with options.test_data"));
    }
    if let Some(path) = &o.offline_file {
        let c = Builder::default().offline_file(path).build().map_err(build_error)?;
        return Ok((Serving::Client(c), None));
    }
    let b = o.builder()?;
    let with_cache = match &o.cache_dir {
        Some(dir) => b.clone().cache_dir(dir),
        None => b.clone(),
    };
    let c = with_cache.build().map_err(build_error)?;
    Ok((Serving::Client(c), Some(b)))
}

/// Makes a client from `options` (JSON: `endpoints`, `sdk_key`,
/// `cache_dir`, TLS, timeouts in seconds, `usage_reports`; or `test_data`
/// with `validate`, or `offline_file`: docs/ABI.md lists every key);
/// `*out` is the new handle, freed with [`flagstream_client_free`].
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
        flagstream_binding::install_fork_handler().map_err(|e| Failure(FlagstreamStatus::Internal, e))?;
        let (serving, restart) = serving(o)?;
        let engine = Engine::new(serving, restart).map_err(|e| Failure(FlagstreamStatus::Internal, e))?;
        let boxed = Box::new(FlagstreamClient {
            engine,
            listeners: ForkMutex::new(Some(std::collections::HashMap::new())),
            next_listener: std::sync::atomic::AtomicU64::new(1),
        });
        // SAFETY: the caller's contract, above.
        unsafe { put(out, Box::into_raw(boxed), "out") }
    })
}

/// The client and the state it serves, unless it was closed; in a forked
/// child, the sync is restarted first. One atomic load on the evaluation
/// path (`checked` false); the PID check besides (`checked` true) off it.
///
/// # Safety
/// `c` is null or a live client handle.
pub(crate) unsafe fn open<'a>(
    c: *const FlagstreamClient,
    checked: bool,
) -> Result<(&'a FlagstreamClient, Guard<Arc<Live>>), Failure> {
    // SAFETY: the caller's contract, above.
    let c = unsafe { handle(c, "client") }?;
    let live = if checked { c.engine.live_checked() } else { c.engine.live() };
    let live = live.map_err(|e| Failure(FlagstreamStatus::Internal, e))?;
    if live.closed {
        return Err(Failure(FlagstreamStatus::Closed, "the client was closed".into()));
    }
    Ok((c, live))
}

/// Waits up to `timeout_ms` for the client's first data: `OK` with data,
/// `TIMEOUT` without (it keeps trying in the background), `CLOSED` when
/// the client is closed meanwhile. In a forked child, for the child's own
/// sync's data (served on return) rather than the parent's.
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
        let (c, live) = unsafe { open(client, true) }?;
        let sync = match (&live.pending, &live.serving) {
            (Some(p), _) => p,
            (None, Serving::Client(sync)) => sync,
            (None, Serving::Fixed { snap: Some(_), .. }) => return Ok(()),
            (None, Serving::Fixed { snap: None, .. }) => {
                return Err(Failure(FlagstreamStatus::Timeout, "no data, and no sync to wait for".into()));
            }
        };
        if sync.status().has_data() {
            c.engine.promote();
            return Ok(());
        }
        // Only the status and the close signal: the wait keeps nothing of
        // the client alive.
        let mut status = sync.status_watch();
        let mut closed = c.engine.closed_signal();
        drop(live);
        let timeout = Duration::from_millis(timeout_ms);
        let waited = wait_on(async move {
            tokio::time::timeout(timeout, async {
                tokio::select! {
                    r = status.wait_for(flagstream::Status::has_data) => r.is_ok(),
                    _ = closed.wait_for(|c| *c) => false,
                }
            })
            .await
        })?;
        match waited {
            Ok(true) => {
                c.engine.promote();
                Ok(())
            }
            Ok(false) => Err(Failure(FlagstreamStatus::Closed, "the client was closed while waiting".into())),
            Err(_) => Err(Failure(FlagstreamStatus::Timeout, format!("no data within {timeout_ms} ms"))),
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
        let (c, live) = unsafe { open(client, true) }?;
        drop(live);
        close(c, Duration::from_millis(timeout_ms))
    })
}

/// Closes `c` once (whoever closes it first; later closes get `CLOSED`):
/// its listeners are stopped (each returns after its callback's last
/// call), then the final usage summary, the sync's stop and cache write.
/// Every step runs even when an earlier one fails; the first failure is
/// returned.
pub(crate) fn close(c: &FlagstreamClient, timeout: Duration) -> Result<(), Failure> {
    let cur = c.engine.close();
    let listeners = c.listeners.lock().take();
    let mut first = Ok(());
    for (_, l) in listeners.into_iter().flatten() {
        if let Err(e) = stop_listener(l) {
            first = first.and(Err(e));
        }
    }
    let Some(cur) = cur else {
        return first.and(Err(Failure(FlagstreamStatus::Closed, "the client was closed".into())));
    };
    let stopped = wait_on(async move {
        if let Some(client) = cur.syncing() {
            client.close(timeout).await;
        }
        drop(cur);
    });
    first.and(stopped)
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
        let mut c = unsafe { Box::from_raw(client) };
        if c.engine.inherited() {
            // A forked child that never used the client: nothing of the
            // parent's is called or waited for (no sync is restarted just
            // to be closed); its listeners are leaked, the engine leaks
            // the rest as it drops.
            std::mem::forget(c.listeners.get_mut().take());
        } else {
            // Already closed, or the close failed: nothing more to send.
            let _closed = close(&c, FREE_CLOSE);
        }
        drop(c);
    }));
}

/// The client's state: 0 initializing (no data yet), 1 ready, 2 stale
/// (serving data that may be out of date, or in a forked child its
/// parent's data until its own sync has some), 3 failed (a permanent
/// error, e.g. a revoked key); `*revision` is the data's revision (0
/// without).
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
        let (_, live) = unsafe { open(client, true) }?;
        let (code, rev) = match &live.serving {
            Serving::Client(c) => match c.status() {
                flagstream::Status::Initializing { .. } => (0, 0),
                flagstream::Status::Ready { revision, .. } => (1, revision),
                flagstream::Status::Stale { revision, .. } => (2, revision),
                flagstream::Status::Failed { .. } => (3, 0),
            },
            Serving::Fixed { snap: None, .. } => (0, 0),
            Serving::Fixed { snap: Some(s), stale, .. } => (if *stale { 2 } else { 1 }, s.revision()),
        };
        // SAFETY: the caller's contract, above.
        unsafe { put(state, code, "state").and_then(|()| put(revision, rev, "revision")) }
    })
}

/// The client's counters (see `flagstream_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlagstreamStats {
    /// Evaluations that returned the default: flag not found.
    pub default_not_found: u64,
    /// ... because the client had no data yet.
    pub default_not_ready: u64,
    /// ... because the flag has another type.
    pub default_wrong_type: u64,
    /// ... because the flag was malformed.
    pub default_malformed: u64,
    /// Streams opened.
    pub connects: u64,
    /// Streams that ended and were reopened.
    pub reconnects: u64,
    /// Moves to another endpoint.
    pub endpoint_switches: u64,
    /// Streams found stalled (no message in time, or an unanswered
    /// keepalive ping) and torn down.
    pub stalls: u64,
    /// Full snapshots requested after a failed apply.
    pub resyncs: u64,
    /// Checksum mismatches detected.
    pub checksum_mismatches: u64,
    /// Heartbeats naming the client's revision with another checksum.
    pub diverged_heads: u64,
    /// Refusals or stream ends that carried a retry-after hint.
    pub retry_hints: u64,
    /// Snapshots applied.
    pub snapshots_applied: u64,
    /// Deltas applied.
    pub deltas_applied: u64,
    /// Cache writes.
    pub cache_writes: u64,
    /// Cache read or write problems.
    pub cache_errors: u64,
    /// Milliseconds spent stale (counted when a stale period ends).
    pub stale_ms: u64,
}

/// The client's counters: `*out` gets them. In a forked child, the
/// child's own sync's (and the fallbacks counted while it served its
/// parent's data are in `default_*`).
///
/// # Safety
/// `client` is a live client handle; `out` is valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_stats(
    client: *const FlagstreamClient,
    out: *mut FlagstreamStats,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (_, live) = unsafe { open(client, true) }?;
        let s = live.stats();
        let stats = FlagstreamStats {
            default_not_found: s.default_not_found,
            default_not_ready: s.default_not_ready,
            default_wrong_type: s.default_wrong_type,
            default_malformed: s.default_malformed,
            connects: s.connects,
            reconnects: s.reconnects,
            endpoint_switches: s.endpoint_switches,
            stalls: s.stalls,
            resyncs: s.resyncs,
            checksum_mismatches: s.checksum_mismatches,
            diverged_heads: s.diverged_heads,
            retry_hints: s.retry_hints,
            snapshots_applied: s.snapshots_applied,
            deltas_applied: s.deltas_applied,
            cache_writes: s.cache_writes,
            cache_errors: s.cache_errors,
            stale_ms: s.stale_ms,
        };
        // SAFETY: the caller's contract, above.
        unsafe { put(out, stats, "out") }
    })
}
