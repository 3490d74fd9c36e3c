//! The read-only status page on the metrics listener (OPERATIONS.md §8):
//! `/status` (HTML, script and style embedded in the binary: no build
//! step) shows the relay tree, the propagation of the latest revisions and
//! the flags with fallbacks or default mismatches, from `/status.json`,
//! which requires `authorization: Bearer <token>` of a token with role
//! read on all environments. Also sets the gauges computed from state
//! before a scrape (the revision drift).
//!
//! The token is a secret: on a metrics listener without TLS it is
//! accepted only from a client on this host (a loopback address), unless
//! `status-page-remote-plaintext` allows it; any other is refused (403,
//! `status_page_requests{result="plaintext_remote"}`) with the reason the
//! page shows. `/status/access` says whether a token would be accepted
//! over this connection, so the page does not send it when it would cross
//! the network in clear.

use std::num::NonZeroU32;
use std::sync::Arc;

use governor::{Quota, RateLimiter};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Response, StatusCode};
use serde_json::{Value as Json, json};

use crate::access::{Role, Tokens};
use crate::ops::metrics::Metrics;
use crate::server::scrape::{Caller, Pages};
use crate::store::{Store, now_ms};
use crate::stream::hub::Hub;

const HTML: &str = include_str!("status_page/index.html");
const SCRIPT: &str = include_str!("status_page/page.js");
const STYLE: &str = include_str!("status_page/page.css");

/// Revisions per environment whose propagation the page shows.
const REVISIONS_SHOWN: usize = 5;

/// Flags per environment the page lists (those with fallbacks or a default
/// mismatch, most fallbacks first).
const FLAGS_SHOWN: usize = 50;

/// Only these sources: the page's own script, style and JSON.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

type LogLimiter = RateLimiter<
    governor::state::NotKeyed,
    governor::state::InMemoryState,
    governor::clock::DefaultClock,
    governor::middleware::NoOpMiddleware,
>;

/// How often at most the relay tree is merged for the drift series and
/// the page.
const DRIFT_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Why a token from another host over plaintext is refused (shown on the
/// page).
const PLAINTEXT_REMOTE: &str = "this status page is served without TLS, so a token sent to it crosses the network in clear: \
     it is accepted only from this host (loopback). Serve the metrics listener over TLS (metrics-tls, with tls-cert and tls-key), \
     open the page through an SSH tunnel or a port-forward to 127.0.0.1, or set status-page-remote-plaintext to accept it anyway";

/// Whether a token is accepted from `caller`: over TLS, from this host,
/// or when `status-page-remote-plaintext` (`remote_plaintext`) allows it.
fn token_accepted(caller: Caller, remote_plaintext: bool) -> bool {
    caller.tls || remote_plaintext || is_local(caller.peer.ip())
}

/// A client on this host: a loopback address (IPv4, IPv6, or IPv4-mapped).
fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        v4 => v4.is_loopback(),
    }
}

/// The relay tree's drift per environment.
type Drift = Arc<Vec<(String, u64)>>;

/// The page's data sources.
pub(crate) struct StatusPage {
    store: Store,
    hub: Arc<Hub>,
    tokens: Arc<Tokens>,
    metrics: Metrics,
    /// Refusal log lines: at most 5 a second.
    logs: LogLimiter,
    /// The environments with a `revision_drift` series.
    drift_series: std::sync::Mutex<std::collections::HashSet<String>>,
    /// The relay tree's drift per environment and when it was merged:
    /// merged at most once per [`DRIFT_EVERY`], however often the
    /// (unauthenticated) metrics port is scraped.
    drift: std::sync::Mutex<(Option<std::time::Instant>, Drift)>,
    /// Accept a token over plaintext from clients not on this host.
    remote_plaintext: bool,
}

impl StatusPage {
    pub(crate) fn new(
        store: Store,
        hub: Arc<Hub>,
        tokens: Arc<Tokens>,
        metrics: Metrics,
        remote_plaintext: bool,
    ) -> StatusPage {
        let five = NonZeroU32::MIN.saturating_add(4);
        StatusPage {
            store,
            hub,
            tokens,
            metrics,
            logs: RateLimiter::direct(Quota::per_second(five)),
            drift_series: std::sync::Mutex::new(std::collections::HashSet::new()),
            drift: std::sync::Mutex::new((None, Arc::default())),
            remote_plaintext,
        }
    }

    /// The relay tree's drift per environment, merged at most once per
    /// [`DRIFT_EVERY`].
    fn drift(&self) -> Drift {
        let mut cached = self.drift.lock().unwrap_or_else(|p| p.into_inner());
        if cached.0.is_none_or(|at| at.elapsed() >= DRIFT_EVERY) {
            *cached = (
                Some(std::time::Instant::now()),
                Arc::new(crate::cluster::tree::drift(&self.store, &self.hub)),
            );
        }
        cached.1.clone()
    }

    fn counted(&self, result: &str) {
        self.metrics.status_page_requests.get_or_create(&vec![("result", result.to_owned())]).inc();
    }

    /// A refusal: counted, logged (rate-limited) with its cause, answered
    /// with `status` and the cause.
    fn refuse(&self, status: StatusCode, result: &str, cause: &str) -> Response<Full<Bytes>> {
        self.counted(result);
        if self.logs.check().is_ok() {
            tracing::warn!(result, cause, "status page request refused");
        }
        respond(status, "application/json", json!({ "error": cause }).to_string())
    }

    /// Whether a token is accepted from `caller` ([`token_accepted`]).
    fn token_accepted(&self, caller: Caller) -> bool {
        token_accepted(caller, self.remote_plaintext)
    }

    /// The JSON the page shows.
    fn data(&self) -> Json {
        let (tree, omitted) = crate::cluster::tree::whole(&self.store, &self.hub, |_| true);
        let heads: std::collections::HashMap<String, (String, u64)> = self
            .store
            .envs()
            .iter()
            .map(|e| {
                let s = e.state.load();
                (s.name.clone(), (s.epoch.clone(), s.revision))
            })
            .collect();
        let now = now_ms();
        let nodes: Vec<Json> = tree
            .iter()
            .map(|n| {
                let envs: Vec<Json> = n
                    .environments
                    .iter()
                    .map(|e| {
                        // Lag against this relay's head, when at its epoch.
                        let lag = heads
                            .get(&e.name)
                            .filter(|(epoch, _)| *epoch == e.epoch)
                            .map(|(_, head)| head.saturating_sub(e.revision));
                        json!({"name": e.name, "revision": e.revision, "lag": lag, "staleness_ms": e.staleness_ms, "subscribers": e.subscribers})
                    })
                    .collect();
                json!({
                    "id": n.id, "parent_id": n.parent_id, "name": n.name, "role": n.role,
                    "version": n.version, "uptime_ms": now.saturating_sub(n.started_unix_ms),
                    "rss_bytes": n.rss_bytes, "streams": n.streams, "environments": envs,
                })
            })
            .collect();
        let drift: std::collections::HashMap<String, u64> = self.drift().iter().cloned().collect();
        let environments: Vec<Json> = self.store.envs().iter().map(|e| self.environment(e, &drift)).collect();
        json!({
            "relay": {"name": tree.first().map(|n| n.name.clone()), "version": env!("CARGO_PKG_VERSION")},
            "now_unix_ms": now,
            "tree": nodes,
            "tree_omitted": omitted,
            "environments": environments,
        })
    }

    /// One environment: head, drift, the latest revisions' propagation,
    /// and its flags with fallbacks or default mismatches.
    fn environment(&self, e: &crate::store::Env, drift: &std::collections::HashMap<String, u64>) -> Json {
        let s = e.state.load();
        // The head, then the log newest first (whose newest entry is
        // usually the head itself: listed once).
        let mut latest: Vec<(u64, u64)> = std::iter::once((s.revision, s.committed_unix_ms))
            .chain(s.log.iter().rev().map(|l| (l.revision, l.committed_unix_ms)))
            .filter(|(r, _)| *r > 0)
            .take(REVISIONS_SHOWN + 1)
            .collect();
        latest.dedup_by_key(|(r, _)| *r);
        latest.truncate(REVISIONS_SHOWN);
        let revisions: Vec<Json> = latest
            .into_iter()
            .map(|(revision, committed)| {
                let p = self.hub.propagation(&s.name, &s.epoch, revision);
                json!({
                    "revision": revision,
                    "committed_unix_ms": if p.committed_ms > 0 { p.committed_ms } else { committed },
                    "subscribers": p.subscribers, "acked": p.acked,
                    "p50_ms": p.p50_ms, "p99_ms": p.p99_ms, "max_ms": p.max_ms,
                    "relays_total": p.relays_total, "relays_reporting": p.relays_reporting,
                })
            })
            .collect();
        let usage = self.hub.usage.view(&s.name, &s.snapshot, crate::usage::Keys::Reported);
        let mut flags: Vec<(u64, Json)> = usage
            .flags
            .iter()
            .filter_map(|f| {
                // No day window: the flag saw no evaluations today, so zero fallbacks.
                let day = f.day.clone().unwrap_or_default();
                let fallbacks = [day.fallback_missing, day.fallback_wrong_type, day.fallback_malformed, day.fallback_not_ready];
                let total = fallbacks.iter().fold(0u64, |a, b| a.saturating_add(*b));
                if total == 0 && !f.default_mismatch {
                    return None;
                }
                let majority = usize::try_from(f.majority_variation).ok().and_then(|v| f.variation_values.get(v));
                let defaults: Vec<Json> =
                    f.defaults.iter().map(|d| json!({"json": d.json, "mismatch": d.mismatch})).collect();
                Some((
                    total,
                    json!({
                        "key": f.key, "exists": f.exists,
                        "fallbacks_day": {"missing": fallbacks[0], "wrong_type": fallbacks[1], "malformed": fallbacks[2], "not_ready": fallbacks[3]},
                        "default_mismatch": f.default_mismatch, "served_most": majority, "defaults": defaults,
                        "last_evaluated_unix_ms": f.last_evaluated_unix_ms,
                    }),
                ))
            })
            .collect();
        let listed = flags.len();
        flags.sort_by_key(|f| std::cmp::Reverse(f.0));
        flags.truncate(FLAGS_SHOWN);
        json!({
            "name": s.name, "epoch": s.epoch, "head_revision": s.revision,
            "drift": drift.get(&s.name).copied().unwrap_or(0),
            "subscribers": self.hub.count(&s.name),
            "revisions": revisions,
            "flags": flags.into_iter().map(|(_, f)| f).collect::<Vec<_>>(),
            "flags_omitted": listed.saturating_sub(FLAGS_SHOWN),
        })
    }
}

fn respond(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(body.into()));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    let value = |s: &str| {
        hyper::header::HeaderValue::from_str(s).unwrap_or(hyper::header::HeaderValue::from_static(""))
    };
    h.insert(hyper::header::CONTENT_TYPE, value(content_type));
    h.insert(hyper::header::CONTENT_SECURITY_POLICY, hyper::header::HeaderValue::from_static(CSP));
    h.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    h.insert(hyper::header::X_CONTENT_TYPE_OPTIONS, hyper::header::HeaderValue::from_static("nosniff"));
    resp
}

impl Pages for StatusPage {
    fn before_scrape(&self) {
        let drift = self.drift();
        // Set in place (a scrape running at the same time never sees the
        // family empty); deleted environments' series go.
        let mut series = self.drift_series.lock().unwrap_or_else(|p| p.into_inner());
        let now: std::collections::HashSet<String> = drift.iter().map(|(env, _)| env.clone()).collect();
        for gone in series.difference(&now) {
            self.metrics.revision_drift.remove(&vec![("environment", gone.clone())]);
        }
        for (env, d) in drift.iter() {
            self.metrics.revision_drift.get_or_create(&vec![("environment", env.clone())]).set(*d as i64);
        }
        *series = now;
    }

    fn get(&self, path: &str, authorization: Option<&str>, caller: Caller) -> Option<Response<Full<Bytes>>> {
        let (content_type, body) = match path {
            "/status" | "/status/" => ("text/html; charset=utf-8", HTML),
            "/status/page.js" => ("text/javascript; charset=utf-8", SCRIPT),
            "/status/page.css" => ("text/css; charset=utf-8", STYLE),
            // Whether a token would be accepted over this connection: the
            // page asks before it sends one, and sends none otherwise.
            "/status/access" => {
                let ok = self.token_accepted(caller);
                let body = json!({ "token_accepted": ok, "reason": (!ok).then_some(PLAINTEXT_REMOTE) });
                self.counted("ok");
                return Some(respond(StatusCode::OK, "application/json", body.to_string()));
            }
            "/status.json" => {
                let Some(secret) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
                    return Some(self.refuse(
                        StatusCode::UNAUTHORIZED,
                        "unauthenticated",
                        "token required: send `authorization: Bearer <token>`",
                    ));
                };
                if !self.token_accepted(caller) {
                    return Some(self.refuse(StatusCode::FORBIDDEN, "plaintext_remote", PLAINTEXT_REMOTE));
                }
                let Some(p) = self.tokens.authenticate(secret.trim()) else {
                    return Some(self.refuse(
                        StatusCode::UNAUTHORIZED,
                        "unauthenticated",
                        "token is not valid",
                    ));
                };
                if let Err(e) = p.require(Role::Read, None, "read the status page") {
                    return Some(self.refuse(StatusCode::FORBIDDEN, "forbidden", &e.to_string()));
                }
                self.counted("ok");
                return Some(respond(StatusCode::OK, "application/json", self.data().to_string()));
            }
            _ if path.starts_with("/status") => {
                self.counted("not_found");
                return None;
            }
            _ => return None,
        };
        self.counted("ok");
        Some(respond(StatusCode::OK, content_type, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(addr: &str, tls: bool) -> Caller {
        Caller { peer: addr.parse().unwrap(), tls }
    }

    /// Over plaintext a token is taken only from this host; over TLS, or
    /// with `status-page-remote-plaintext`, from anywhere.
    #[test]
    fn a_token_over_plaintext_only_from_this_host() {
        for local in ["127.0.0.1:5000", "127.8.9.1:5000", "[::1]:5000", "[::ffff:127.0.0.1]:5000"] {
            assert!(token_accepted(caller(local, false), false), "{local}");
        }
        for remote in ["192.0.2.7:5000", "[2001:db8::1]:5000", "[::ffff:192.0.2.7]:5000"] {
            assert!(!token_accepted(caller(remote, false), false), "{remote}: refused in clear");
            assert!(token_accepted(caller(remote, true), false), "{remote}: over TLS");
            assert!(token_accepted(caller(remote, false), true), "{remote}: allowed by the option");
        }
        assert!(
            PLAINTEXT_REMOTE.contains("metrics-tls")
                && PLAINTEXT_REMOTE.contains("status-page-remote-plaintext")
        );
    }
}
