//! OFREP's HTTP handling: routing, the key and its kind, the page's
//! origin (`cors.rs`), the limits (request body size, requests per second
//! per key and per client address: `429` with `Retry-After` in whole
//! seconds), handing the admitted request to `job.rs`, and the answers'
//! statuses and headers. Every refusal is counted
//! (`limit_hits{limit="ofrep_…"}`) and logged (at most 5 lines a second);
//! every answer is counted by endpoint and status (`ofrep_requests`).

use std::future::Future;
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use http_body_util::{BodyExt, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value as Json, json};

use super::answer::Viewer;
use super::job::{self, Answered, Endpoint, Job};
use super::usage::OfrepUsage;
use super::view::Views;
use super::{cors, events};
use crate::config::OfrepSettings;
use crate::ops::http::{Body, Bounds, Caller, Handler, full};
use crate::ops::metrics::Metrics;
use crate::ops::secret;
use crate::store::Store;

/// The path prefix of the evaluation endpoints.
const PREFIX: &str = "/ofrep/v1/evaluate/flags";
/// The change stream's path.
const EVENTS: &str = "/ofrep/v1/events";

/// The OFREP listener's bounds: many clients, several requests per
/// connection (browsers keep theirs open).
pub(crate) fn bounds(s: &OfrepSettings) -> Bounds {
    Bounds {
        name: "ofrep",
        connections: s.max_connections,
        per_address: s.max_connections_per_address,
        header_timeout: Duration::from_secs(5),
        lifetime: Duration::from_secs(600),
        keep_alive: true,
    }
}

/// The OFREP endpoints (see the module).
#[derive(Clone)]
pub(crate) struct Ofrep {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    metrics: Metrics,
    settings: OfrepSettings,
    /// Per server-side key, by the key's hash (ids repeat across
    /// environments).
    per_key: DefaultKeyedRateLimiter<String>,
    /// Per client-side key, by the key's hash.
    per_client_key: DefaultKeyedRateLimiter<String>,
    per_address: DefaultKeyedRateLimiter<IpAddr>,
    /// Places of the change streams (`ofrep-max-event-streams`).
    streams: Arc<tokio::sync::Semaphore>,
    /// Evaluations counted for the usage table.
    usage: Arc<OfrepUsage>,
    /// What client-side keys' change streams follow.
    views: Arc<Views>,
    /// Refusal log lines: at most 5 a second (bursts of 10).
    logs: DefaultDirectRateLimiter,
}

/// A refusal or failure: its status, its body and, for a rate limit, the
/// seconds to wait.
pub(super) struct Refused {
    pub(super) status: StatusCode,
    pub(super) body: Json,
    retry_after: Option<u64>,
    /// `limit_hits` label, when a limit triggered.
    pub(super) limit: Option<&'static str>,
    /// Sent without CORS headers (the page's origin is refused).
    hidden: bool,
}

impl Refused {
    pub(super) fn new(status: StatusCode, code: &str, details: impl Into<String>) -> Refused {
        Refused {
            status,
            body: json!({ "errorCode": code, "errorDetails": details.into() }),
            retry_after: None,
            limit: None,
            hidden: false,
        }
    }
}

fn quota(per_sec: u32) -> Quota {
    let n = NonZeroU32::new(per_sec.max(1)).unwrap_or(NonZeroU32::MIN);
    Quota::per_second(n).allow_burst(n.saturating_mul(NonZeroU32::MIN.saturating_add(1)))
}

impl Ofrep {
    /// The endpoints over `store`, within `settings`.
    pub(crate) fn new(store: Store, metrics: Metrics, settings: OfrepSettings) -> Ofrep {
        Ofrep {
            inner: Arc::new(Inner {
                per_key: RateLimiter::keyed(quota(settings.requests_per_sec_per_key)),
                per_client_key: RateLimiter::keyed(quota(settings.requests_per_sec_per_client_key)),
                per_address: RateLimiter::keyed(quota(settings.requests_per_sec_per_address)),
                streams: Arc::new(tokio::sync::Semaphore::new(settings.max_event_streams)),
                usage: Arc::default(),
                views: Arc::default(),
                logs: RateLimiter::direct(
                    Quota::per_second(NonZeroU32::MIN.saturating_add(4))
                        .allow_burst(NonZeroU32::MIN.saturating_add(9)),
                ),
                store,
                metrics,
                settings,
            }),
        }
    }

    /// The evaluations counted since the last call, as usage summaries
    /// per (environment, SDK key id) covering `start..end` (Unix ms).
    pub(crate) fn take_usage(
        &self,
        start: u64,
        end: u64,
    ) -> Vec<(String, String, flagstream_proto::v1::UsageSummary)> {
        self.inner.usage.take(start, end)
    }

    /// Forgets rate buckets that are full again (bounded memory: called
    /// once a minute while the listener runs).
    pub(crate) fn prune(&self) {
        self.inner.per_key.retain_recent();
        self.inner.per_key.shrink_to_fit();
        self.inner.per_client_key.retain_recent();
        self.inner.per_client_key.shrink_to_fit();
        self.inner.per_address.retain_recent();
        self.inner.per_address.shrink_to_fit();
    }

    /// A change stream (`GET /ofrep/v1/events`, see `events.rs`).
    fn events(&self, req: &Request<Incoming>, origin: Option<&str>) -> Result<Body, Refused> {
        let i = &self.inner;
        if req.method() != Method::GET {
            return Err(Refused::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "GENERAL",
                "the change stream is a GET request",
            ));
        }
        let query = req.uri().query().unwrap_or("");
        let param = |name: &str| {
            query.split('&').find_map(|p| p.split_once('=').filter(|(n, _)| *n == name).map(|(_, v)| v))
        };
        let unauthorized = || {
            let mut r =
                Refused::new(StatusCode::UNAUTHORIZED, "GENERAL", "unknown or revoked change stream token");
            r.limit = Some("ofrep_unauthenticated");
            r
        };
        let (Some(env), Some(token)) = (param("env"), param("token")) else { return Err(unauthorized()) };
        let env = decode(env).map_err(|_| unauthorized())?;
        let env = i.store.env(&env).map_err(|_| unauthorized())?;
        let Some((key_id, viewer)) = events::authorized(&env, token, crate::store::now_ms()) else {
            return Err(unauthorized());
        };
        if let Some(o) = origin
            && !env.meta.load().allows_origin(o)
        {
            return Err(origin_refused(o, Some(&env.meta.load().name)));
        }
        let Ok(slot) = i.streams.clone().try_acquire_owned() else {
            let mut r = Refused::new(
                StatusCode::TOO_MANY_REQUESTS,
                "GENERAL",
                format!("{} change streams are open (ofrep-max-event-streams)", i.settings.max_event_streams),
            );
            r.retry_after = Some(5);
            r.limit = Some("ofrep_event_streams");
            return Err(r);
        };
        let last = req.headers().get("last-event-id").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let follow =
            events::Follow { env, key_id, viewer, views: i.views.clone(), origin: origin.map(str::to_owned) };
        Ok(events::stream(follow, last, i.settings.event_spread, i.metrics.clone(), slot))
    }

    /// One request's answer, or its refusal.
    async fn answer(&self, req: Request<Incoming>, origin: Option<&str>) -> Result<Answered, Refused> {
        let i = &self.inner;
        let endpoint = match route(req.uri().path()) {
            Route::Bulk => Endpoint::Bulk,
            Route::Single(raw) => Endpoint::Single(decode(raw)?),
            Route::Events | Route::Other => {
                let path = req.uri().path();
                return Err(Refused::new(
                    StatusCode::NOT_FOUND,
                    "GENERAL",
                    format!("no OFREP endpoint at {path}"),
                ));
            }
        };
        if req.method() != Method::POST {
            return Err(Refused::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "GENERAL",
                "OFREP evaluations are POST requests",
            ));
        }
        let secret = credential(&req).ok_or_else(|| {
            let mut r = Refused::new(
                StatusCode::UNAUTHORIZED,
                "GENERAL",
                "no credential: send the SDK key as `Authorization: Bearer <key>` or `X-API-Key: <key>`",
            );
            r.limit = Some("ofrep_unauthenticated");
            r
        })?;
        if secret.len() > MAX_CREDENTIAL {
            let mut r = Refused::new(StatusCode::UNAUTHORIZED, "GENERAL", "unknown key");
            r.limit = Some("ofrep_unauthenticated");
            return Err(r);
        }
        let key_hash = secret::hash_secret(&secret);
        let Some(found) = i.store.env_by_key_hash(&key_hash) else {
            let mut r = Refused::new(StatusCode::UNAUTHORIZED, "GENERAL", "unknown key");
            r.limit = Some("ofrep_unauthenticated");
            return Err(r);
        };
        let (env, key_id) = (found.env, found.id);
        let viewer = if found.client { Viewer::Client } else { Viewer::Server };
        if let Some(o) = origin
            && !env.meta.load().allows_origin(o)
        {
            return Err(origin_refused(o, Some(&env.meta.load().name)));
        }
        let (limiter, rate, option) = match viewer {
            Viewer::Server => {
                (&i.per_key, i.settings.requests_per_sec_per_key, "ofrep-requests-per-sec-per-key")
            }
            Viewer::Client => (
                &i.per_client_key,
                i.settings.requests_per_sec_per_client_key,
                "ofrep-requests-per-sec-per-client-key",
            ),
        };
        if let Err(not_until) = limiter.check_key(&key_hash) {
            return Err(rate_refusal(
                not_until,
                "ofrep_rate_per_key",
                format!("over {rate}/s for this key ({option})"),
            ));
        }
        let if_none_match =
            req.headers().get(hyper::header::IF_NONE_MATCH).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let max = i.settings.max_body_bytes;
        let read = tokio::time::timeout(BODY_TIMEOUT, Limited::new(req.into_body(), max).collect()).await;
        let read = read.map_err(|_| {
            let mut r = Refused::new(
                StatusCode::BAD_REQUEST,
                "PARSE_ERROR",
                format!("request body: not received within {} s", BODY_TIMEOUT.as_secs()),
            );
            r.limit = Some("ofrep_body");
            r
        })?;
        let body = read.map_err(|e| {
            let mut r = if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() {
                Refused::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_CONTEXT",
                    format!("request body: over {max} bytes (ofrep-max-body-bytes)"),
                )
            } else {
                Refused::new(StatusCode::BAD_REQUEST, "PARSE_ERROR", format!("request body: {e}"))
            };
            r.limit = Some("ofrep_body");
            r
        })?;
        let state = env.state.load_full();
        let stream_uri = match endpoint {
            Endpoint::Bulk => events::request_uri(&env.meta.load().name, &key_hash),
            Endpoint::Single(_) => String::new(),
        };
        let job = Job {
            body: body.to_bytes(),
            state,
            endpoint,
            viewer,
            usage: i.usage.clone(),
            env_name: env.meta.load().name.clone(),
            key_id,
            stream_uri,
            if_none_match,
        };
        job::run(job).await
    }

    /// Counts and logs a refusal.
    fn refused(&self, r: &Refused, caller: Caller) {
        if let Some(limit) = r.limit {
            self.inner.metrics.limit_hit(limit);
        }
        if self.inner.logs.check().is_ok() {
            tracing::warn!(
                peer = %caller.peer,
                status = r.status.as_u16(),
                details = %r.body.get("errorDetails").and_then(Json::as_str).unwrap_or(""),
                "OFREP request refused"
            );
        }
    }
}

/// A refusal as a response: its status, `Retry-After`, JSON body and the
/// CORS headers for `reader` (the page origin that may read it).
fn refusal_response(r: &Refused, reader: Option<&str>) -> Result<Response<Body>, hyper::http::Error> {
    let mut resp = cors::with_headers(Response::builder(), reader)
        .status(r.status)
        .header(hyper::header::CONTENT_TYPE, "application/json");
    if let Some(secs) = r.retry_after {
        resp = resp.header(hyper::header::RETRY_AFTER, secs.to_string());
    }
    resp.body(full(r.body.to_string()))
}

/// Longest credential read (longer ones are refused unhashed).
const MAX_CREDENTIAL: usize = 256;
/// Time a request body has to arrive once its head did.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// What a path names (leading slashes collapsed: a base URL ending in `/`
/// makes clients send `//ofrep/...`).
#[derive(Clone, Copy)]
enum Route<'a> {
    Single(&'a str),
    Bulk,
    Events,
    Other,
}

fn route(path: &str) -> Route<'_> {
    let trimmed = path.trim_start_matches('/');
    let path = &path[path.len() - trimmed.len() - usize::from(path.starts_with('/'))..];
    if path == EVENTS {
        return Route::Events;
    }
    match path.strip_prefix(PREFIX) {
        Some("") => Route::Bulk,
        // `/flags/` is a single flag whose key is empty (404), as the
        // providers build the path.
        Some(rest) if rest.starts_with('/') => Route::Single(&rest[1..]),
        _ => Route::Other,
    }
}

/// The refusal of a page whose origin `env` does not list (`None`: that
/// no environment here lists, for a preflight).
fn origin_refused(origin: &str, env: Option<&str>) -> Refused {
    let whose = match env {
        Some(env) => format!("environment {env:?}'s keys"),
        None => "OFREP on this relay: no environment lists it".to_owned(),
    };
    let mut r = Refused::new(
        StatusCode::FORBIDDEN,
        "GENERAL",
        format!("origin {origin:?} may not use {whose} (flagctl env cors)"),
    );
    r.limit = Some("ofrep_origin");
    r.hidden = true;
    r
}

/// The SDK key a request carries: `Authorization: Bearer <key>`, a bare
/// `Authorization: <key>`, or `X-API-Key: <key>`.
fn credential(req: &Request<Incoming>) -> Option<String> {
    let h = req.headers();
    if let Some(v) = h.get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        let v = v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")).unwrap_or(v).trim();
        if !v.is_empty() {
            return Some(v.to_owned());
        }
    }
    h.get("x-api-key").and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// A flag key from the path (percent-decoded; the OFREP providers send
/// keys as they are, so a plain key arrives unchanged).
fn decode(raw: &str) -> Result<String, Refused> {
    let mut out = Vec::with_capacity(raw.len());
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
            if let Some(v) = hex {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).map_err(|_| {
        Refused::new(StatusCode::BAD_REQUEST, "PARSE_ERROR", "the flag key in the path is not UTF-8")
    })
}

/// A rate refusal: `429` with `Retry-After` in whole seconds (at least 1).
fn rate_refusal(
    not_until: governor::NotUntil<governor::clock::QuantaInstant>,
    limit: &'static str,
    why: String,
) -> Refused {
    let wait = not_until.wait_time_from(DefaultClock::default().now());
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut r = Refused::new(StatusCode::TOO_MANY_REQUESTS, "GENERAL", why);
    r.retry_after = Some(secs.max(1));
    r.limit = Some(limit);
    r
}

impl Handler for Ofrep {
    fn call(
        &self,
        req: Request<Incoming>,
        caller: Caller,
    ) -> impl Future<Output = Result<Response<Body>, std::io::Error>> + Send {
        let this = self.clone();
        async move {
            let path = req.uri().path().to_owned();
            let route = route(&path);
            let origin = cors::origin(&req);
            // What a page from `origin` may read: an answer for its key's
            // environment (checked with the key), and before the key is
            // known, a refusal when some environment here allows it.
            let readable = |r: &Refused| {
                origin.as_deref().filter(|o| !r.hidden && cors::allowed_anywhere(&this.inner.store, o))
            };
            let label = match route {
                Route::Single(_) => "single",
                Route::Bulk => "bulk",
                Route::Events => "events",
                Route::Other => "other",
            };
            // Every request from an address counts against its rate, an
            // unknown path's and a refused one's too.
            let address = crate::ops::limit::client_of(caller.peer.ip());
            let over = this.inner.per_address.check_key(&address).err().map(|not_until| {
                rate_refusal(
                    not_until,
                    "ofrep_rate_per_address",
                    format!(
                        "over {}/s from this address (ofrep-requests-per-sec-per-address)",
                        this.inner.settings.requests_per_sec_per_address
                    ),
                )
            });
            if req.method() == Method::OPTIONS {
                let allowed = origin.as_deref().filter(|o| cors::allowed_anywhere(&this.inner.store, o));
                let (status, resp) = match (over, allowed) {
                    (None, Some(o)) => (StatusCode::NO_CONTENT, cors::preflight(o)),
                    (over, _) => {
                        let r = match over {
                            Some(r) => r,
                            None => origin_refused(origin.as_deref().unwrap_or("(none)"), None),
                        };
                        this.refused(&r, caller);
                        (r.status, refusal_response(&r, readable(&r)))
                    }
                };
                this.inner.metrics.ofrep_request("preflight", status.as_u16());
                return resp.map_err(std::io::Error::other);
            }
            if matches!(route, Route::Events) {
                let opened = match over {
                    Some(r) => Err(r),
                    None => this.events(&req, origin.as_deref()),
                };
                let (status, resp) = match opened {
                    Ok(body) => (
                        StatusCode::OK,
                        cors::with_headers(Response::builder(), origin.as_deref())
                            .header(hyper::header::CONTENT_TYPE, "text/event-stream")
                            .header(hyper::header::CACHE_CONTROL, "no-cache")
                            .body(body),
                    ),
                    Err(r) => {
                        this.refused(&r, caller);
                        (r.status, refusal_response(&r, readable(&r)))
                    }
                };
                this.inner.metrics.ofrep_request("events", status.as_u16());
                return resp.map_err(std::io::Error::other);
            }
            let answered = match over {
                Some(r) => Err(r),
                None => this.answer(req, origin.as_deref()).await,
            };
            let (status, body, etag, retry_after, reader) = match answered {
                Ok(a) => (a.status, a.body, a.etag, None, origin.clone()),
                Err(mut r) => {
                    let reader = readable(&r).map(str::to_owned);
                    this.refused(&r, caller);
                    // A single flag's 400 names its flag (OFREP's shape).
                    if r.status == StatusCode::BAD_REQUEST
                        && let Route::Single(raw) = route
                        && let Ok(key) = decode(raw)
                        && let Some(m) = r.body.as_object_mut()
                    {
                        m.insert("key".into(), Json::from(key));
                    }
                    (r.status, Bytes::from(r.body.to_string()), None, r.retry_after, reader)
                }
            };
            this.inner.metrics.ofrep_request(label, status.as_u16());
            // Idle connections close after 5 s (the header deadline): say
            // so, so clients do not reuse one as it closes.
            let mut resp = cors::with_headers(Response::builder(), reader.as_deref())
                .status(status)
                .header("keep-alive", "timeout=4");
            if let Some(tag) = &etag {
                resp = resp.header(hyper::header::ETAG, tag.as_str());
            }
            if let Some(secs) = retry_after {
                resp = resp.header(hyper::header::RETRY_AFTER, secs.to_string());
            }
            let body = if status == StatusCode::NOT_MODIFIED {
                Bytes::new()
            } else {
                resp = resp.header(hyper::header::CONTENT_TYPE, "application/json");
                body
            };
            resp.body(full(body)).map_err(std::io::Error::other)
        }
    }
}
