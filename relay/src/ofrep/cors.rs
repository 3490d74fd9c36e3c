//! Cross-origin requests (CORS) for pages that call OFREP from a browser.
//!
//! Each environment lists the origins allowed to use its keys
//! (`SetCorsOrigins`, `flagctl env cors`). A preflight (`OPTIONS`) carries
//! no key, so it is answered for an origin that some environment on this
//! relay allows; the request that follows is then checked against its
//! key's environment, and refused (`403`, without CORS headers, so the
//! page cannot read even the refusal) when that environment does not list
//! the origin. Answers to an allowed origin name it in
//! `Access-Control-Allow-Origin` (with `Vary: Origin`) and expose `ETag`
//! and `Retry-After`; credentials (cookies) are never allowed: the key
//! travels in a header.

use hyper::{Request, Response, StatusCode};

use crate::ops::http::{Body, full};
use crate::store::Store;

/// Request headers a page may send.
const ALLOWED_HEADERS: &str = "Content-Type, Authorization, X-API-Key, If-None-Match, Last-Event-ID";
/// How long a browser may keep a preflight's answer, seconds.
const MAX_AGE: &str = "600";

/// The request's `Origin`, if it has one.
pub(crate) fn origin<B>(req: &Request<B>) -> Option<String> {
    req.headers().get(hyper::header::ORIGIN).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Whether some environment on this relay allows `origin`.
pub(crate) fn allowed_anywhere(store: &Store, origin: &str) -> bool {
    store.envs().iter().any(|e| e.meta.load().allows_origin(origin))
}

/// The answer to a preflight from `origin`, which some environment
/// allows: `204` with the allowed methods and headers.
pub(crate) fn preflight(origin: &str) -> Result<Response<Body>, hyper::http::Error> {
    with_headers(Response::builder(), Some(origin))
        .status(StatusCode::NO_CONTENT)
        .header(hyper::header::ACCESS_CONTROL_ALLOW_METHODS, "GET, POST, OPTIONS")
        .header(hyper::header::ACCESS_CONTROL_ALLOW_HEADERS, ALLOWED_HEADERS)
        .header(hyper::header::ACCESS_CONTROL_MAX_AGE, MAX_AGE)
        .body(full(""))
}

/// `builder` with the CORS headers for `origin` (none when `None`).
pub(crate) fn with_headers(
    builder: hyper::http::response::Builder,
    origin: Option<&str>,
) -> hyper::http::response::Builder {
    match origin {
        Some(o) => builder
            .header(hyper::header::ACCESS_CONTROL_ALLOW_ORIGIN, o)
            .header(hyper::header::VARY, "Origin")
            .header(hyper::header::ACCESS_CONTROL_EXPOSE_HEADERS, "ETag, Retry-After"),
        None => builder,
    }
}
