//! Building a [`Client`]: every setting with its production default, the
//! offline sources (a flag file, in-code test data), the cache at start
//! (with the `cache` feature) and the background tasks.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use rand::seq::SliceRandom;
use tokio::sync::{broadcast, watch};

use super::handle::Client;
use super::tasks::Tasks;
#[cfg(feature = "cache")]
use super::tasks::{FinalWrite, cache_writer};
#[cfg(feature = "cache")]
use crate::cache::{Cache, key_fingerprint};
use crate::error::BuildError;
use crate::follow::FollowConfig;
#[cfg(feature = "cache")]
use crate::held::CachedHeld;
use crate::shared::Shared;
use crate::stats::Counters;
use crate::status::{Source, Status};
use crate::sync::ClientSink;
use flagstream_core::{FlagSet, Limits, Snapshot, SnapshotCell};

/// Applied revisions kept for slow change listeners before they lag.
const CHANGE_BUFFER: usize = 64;

impl Client {
    /// A builder with production defaults.
    pub fn builder() -> Builder {
        Builder::default()
    }
}

/// Builder for [`Client`]; every setting has a production default.
#[derive(Debug, Clone)]
pub struct Builder {
    cfg: FollowConfig,
    limits: Limits,
    #[cfg(feature = "cache")]
    cache_dir: Option<PathBuf>,
    #[cfg(feature = "cache")]
    cache_interval: Duration,
    file: Option<PathBuf>,
    test_data: Option<FlagSet>,
    shuffle: bool,
    /// `None`: on when following a relay, off for offline sources.
    usage_reports: Option<bool>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            cfg: FollowConfig::default(),
            limits: Limits::default(),
            #[cfg(feature = "cache")]
            cache_dir: None,
            #[cfg(feature = "cache")]
            cache_interval: Duration::from_millis(500),
            file: None,
            test_data: None,
            shuffle: true,
            usage_reports: None,
        }
    }
}

macro_rules! setter {
    ($(#[$doc:meta])* $name:ident: $t:ty) => {
        $(#[$doc])*
        pub fn $name(mut self, v: $t) -> Self {
            self.cfg.$name = v;
            self
        }
    };
}

impl Builder {
    /// Relay URLs (`http://host:port`). The order is shuffled per process
    /// so a fleet spreads out; see [`Builder::keep_endpoint_order`].
    pub fn endpoints<I: IntoIterator<Item = S>, S: Into<String>>(mut self, endpoints: I) -> Self {
        self.cfg.endpoints = endpoints.into_iter().map(Into::into).collect();
        self
    }

    /// Try endpoints in the given order (tests, a preferred local relay).
    pub fn keep_endpoint_order(mut self) -> Self {
        self.shuffle = false;
        self
    }

    /// The environment's SDK key.
    pub fn sdk_key(mut self, key: impl Into<String>) -> Self {
        self.cfg.credential = crate::secret::Secret::new(key.into());
        self
    }

    /// Directory of the last-known-good cache (created if missing). Only
    /// with the `cache` feature (on by default): without it the client has
    /// no cache, and this option does not exist.
    #[cfg(feature = "cache")]
    pub fn cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// How long a received change waits before it is written to the
    /// cache, so a burst of changes is one write (default 500 ms). The
    /// newest applied revision is written when the last clone of the
    /// client is dropped in any case.
    #[cfg(feature = "cache")]
    pub fn cache_write_interval(mut self, interval: Duration) -> Self {
        self.cache_interval = interval;
        self
    }

    /// For `https://` endpoints: trust this PEM CA bundle instead of the
    /// public web roots.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.cfg.tls.ca = Some(pem.into());
        self
    }

    /// For `https://` endpoints: present this client certificate and key
    /// (PEM) for mutual TLS.
    pub fn tls_identity_pem(mut self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        self.cfg.tls.identity = Some((cert.into(), key.into()));
        self
    }

    /// Serve flags from a YAML/JSON flag file instead of a relay (the
    /// format `flagctl export` writes).
    pub fn offline_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.file = Some(path.into());
        self
    }

    /// Serve these flags instead of a relay: for unit tests of your code.
    pub fn test_data(mut self, set: FlagSet) -> Self {
        self.test_data = Some(set);
        self
    }

    setter!(/// Connect timeout per attempt (default 3 s).
        connect_timeout: Duration);
    setter!(/// HTTP/2 keepalive ping interval, also while idle (default 10 s).
        keepalive_interval: Duration);
    setter!(/// HTTP/2 keepalive ping timeout (default 5 s).
        keepalive_timeout: Duration);
    setter!(/// TCP_USER_TIMEOUT of the connection (default 20 s).
        tcp_user_timeout: Duration);
    setter!(/// Time allowed for the first message of a stream (default 10 s).
        first_message_timeout: Duration);
    setter!(/// Heartbeat interval assumed until the relay states its own (default 15 s).
        heartbeat_default: Duration);
    setter!(/// Missed heartbeats before the stream is declared stalled (default 3).
        watchdog_misses: u32);
    setter!(/// First backoff ceiling (default 1 s).
        backoff_base: Duration);
    setter!(/// Largest backoff ceiling (default 30 s).
        backoff_cap: Duration);
    setter!(/// A stream up this long resets the backoff (default 60 s).
        healthy_after: Duration);
    setter!(/// Random delay before resubscribing after a stall (up to; default 2 s).
        stall_jitter: Duration);
    setter!(/// Without a stream for this long, data is reported stale (default 5 s).
        stale_after: Duration);
    setter!(/// How often a usage summary (what was evaluated: per flag,
        /// variations served, fallbacks by cause, defaults passed) is sent
        /// to the relay (default 60 s; PROTOCOL.md "Usage summaries").
        usage_interval: Duration);

    /// Whether to count evaluations and send usage summaries to the relay
    /// (default: on when following a relay, off for offline files and test
    /// data, where nothing would send them; `true` there counts anyway,
    /// e.g. to measure the cost). Off, evaluation touches no usage counter.
    pub fn usage_reports(mut self, on: bool) -> Self {
        self.usage_reports = Some(on);
        self
    }
    /// Validation limits for received data.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.cfg.max_snapshot_bytes = limits.max_snapshot_bytes;
        self.limits = limits;
        self
    }

    /// Builds the client. Returns at once: the cache (if any) is loaded
    /// first, synchronously, then the sync task starts in the background.
    pub fn build(mut self) -> Result<Client, BuildError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| BuildError::NoRuntime)?;
        let (status, _) = watch::channel(Status::Initializing { attempts: Vec::new() });
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        if self.cfg.watchdog_misses == 0
            || self.cfg.heartbeat_default.is_zero()
            || self.cfg.first_message_timeout.is_zero()
        {
            return Err(BuildError::Config(
                "watchdog_misses, heartbeat_default and first_message_timeout must be non-zero".into(),
            ));
        }
        if let Some(problem) = self.cfg.tls.pem_problem() {
            return Err(BuildError::Config(problem));
        }
        let offline = self.file.is_some() || self.test_data.is_some();
        if !offline {
            if self.cfg.endpoints.is_empty() {
                return Err(BuildError::NoEndpoints);
            }
            if self.cfg.credential.is_empty() {
                return Err(BuildError::NoSdkKey);
            }
            if let Some(bad) =
                self.cfg.endpoints.iter().find(|e| !e.starts_with("http://") && !e.starts_with("https://"))
            {
                return Err(BuildError::BadEndpoint(bad.clone()));
            }
            if self.shuffle {
                self.cfg.endpoints.shuffle(&mut rand::rng());
            }
        }
        #[cfg(feature = "cache")]
        let cache = if offline { None } else { self.cache_dir.as_ref().and_then(|dir| open_cache(dir)) };
        #[cfg(feature = "cache")]
        let (cache_tx, cache_rx) = match &cache {
            Some(_) => {
                let (tx, rx) = watch::channel(None);
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let shared = Arc::new(Shared {
            cell: SnapshotCell::new(Snapshot::empty()),
            ready: AtomicBool::new(false),
            stale: AtomicBool::new(false),
            relay_staleness_ms: AtomicU64::new(0),
            confirmed_unix_ms: AtomicU64::new(0),
            status,
            counters: Counters::default(),
            usage: crate::usage_summary::Usage::new(self.usage_reports.unwrap_or(!offline)),
            changes,
            #[cfg(feature = "cache")]
            cache_tx,
        });

        if let Some(set) = self.test_data.take() {
            let snap = Snapshot::compile(&set, &self.limits)
                .map_err(|e| BuildError::File { path: "test data".into(), source: Box::new(e) })?;
            shared.publish(
                Arc::new(snap),
                Source::Test,
                set.flags.into_iter().map(|f| f.key).collect(),
                None,
            );
            return Ok(Client { shared, _tasks: Arc::new(Tasks::none()) });
        }
        if let Some(path) = &self.file {
            let set = read_flag_file(path)?;
            let snap = Snapshot::compile(&set, &self.limits)
                .map_err(|e| BuildError::File { path: path.display().to_string(), source: Box::new(e) })?;
            shared.publish(
                Arc::new(snap),
                Source::File,
                set.flags.into_iter().map(|f| f.key).collect(),
                None,
            );
            return Ok(Client { shared, _tasks: Arc::new(Tasks::none()) });
        }

        #[cfg(feature = "cache")]
        let fp = key_fingerprint(self.cfg.credential.expose());
        #[cfg(feature = "cache")]
        let held = cache.as_ref().and_then(|c| serve_cached(c, fp, &self.limits, &shared, &runtime));
        #[cfg(not(feature = "cache"))]
        let held = None;
        let mut tasks = Tasks::none();
        let sink = Arc::new(ClientSink::new(shared.clone(), self.limits.clone(), self.cfg.stale_after, held));
        let (closing, closed) = watch::channel(false);
        tasks.sync = std::sync::Mutex::new(Some(runtime.spawn(crate::follow::run_until_closed(
            sink,
            self.cfg.clone(),
            closed,
        ))));
        tasks.closing = Some(closing);
        tasks.runtime = Some(runtime.clone());
        #[cfg(feature = "cache")]
        if let (Some(cache), Some(rx)) = (cache, cache_rx) {
            let cache = Arc::new(cache);
            let writer =
                cache_writer(shared.clone(), Arc::downgrade(&cache), rx.clone(), self.cache_interval, fp);
            tasks.handles.get_mut().unwrap_or_else(|p| p.into_inner()).push(runtime.spawn(writer));
            tasks.cache = std::sync::Mutex::new(Some(FinalWrite {
                shared: shared.clone(),
                cache,
                latest: rx,
                key_fingerprint: fp,
            }));
        }
        Ok(Client { shared, _tasks: Arc::new(tasks) })
    }
}

#[cfg(feature = "cache")]
fn open_cache(dir: &std::path::Path) -> Option<Cache> {
    match Cache::open(dir) {
        Ok(c) => Some(c),
        Err(e) => {
            tracing::warn!(error = %e, dir = %dir.display(), "running without a flag cache");
            None
        }
    }
}

/// Serves the cached flags, if the cache holds usable ones for this key,
/// until the stream confirms them; returns the held state they came with.
#[cfg(feature = "cache")]
fn serve_cached(
    cache: &Cache,
    key_fingerprint: u64,
    limits: &Limits,
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
) -> Option<CachedHeld> {
    match cache.load(key_fingerprint, limits) {
        Ok(Some((held, snap))) => {
            tracing::info!(
                revision = held.revision,
                flags = snap.len(),
                "serving the cached flags until the relay confirms them"
            );
            // Flags from the cache compile on first use; compile the
            // rest off the evaluation path so later evaluations
            // never do (a few tens of ms for 10,000 flags).
            let warm = snap.clone();
            runtime.spawn_blocking(move || {
                let compiled = warm.warm_up();
                tracing::debug!(compiled, "cached flags compiled");
            });
            // Cached data is stale until the stream confirms it.
            shared.publish(
                snap,
                Source::Cache,
                Vec::new(),
                Some("serving cached flags; not yet confirmed by a relay"),
            );
            Some(held)
        }
        Ok(None) => None,
        Err(e) => {
            crate::stats::bump(&shared.counters.cache_errors);
            tracing::warn!(error = %e, "ignoring the flag cache");
            None
        }
    }
}

/// Reads a YAML or JSON flag file (`flagctl export` format).
pub fn read_flag_file(path: &std::path::Path) -> Result<FlagSet, BuildError> {
    let err = |e: Box<dyn std::error::Error + Send + Sync>| BuildError::File {
        path: path.display().to_string(),
        source: e,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(Box::new(e)))?;
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| err(Box::new(e)))
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| err(Box::new(e)))
    }
}
