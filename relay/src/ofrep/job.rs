//! One OFREP evaluation request's work once it is admitted: parse the
//! body, map the context, evaluate (one flag, or every flag the key may
//! see), count the evaluations for the usage table, and decide `304`.
//!
//! A small request runs on the worker that received it: a body up to
//! [`INLINE_BODY`] bytes for one flag, or for every flag of an environment
//! of up to [`INLINE_FLAGS`] flags (~0.7 µs a flag: at most ~150 µs on the
//! worker). Handing it to the blocking pool costs more than the evaluation
//! (thread wake-ups, and the allocator contention of many pool threads;
//! measured in docs/BENCHMARKS.md, "OFREP"). A larger one runs on the
//! blocking pool, so it never holds a worker.

use std::sync::Arc;

use hyper::StatusCode;
use hyper::body::Bytes;
use serde_json::Value as Json;

use super::answer::{self, Viewer};
use super::context;
use super::handler::Refused;
use super::usage::OfrepUsage;
use crate::store::state::EnvState;

/// Largest body evaluated on the worker, bytes.
pub(crate) const INLINE_BODY: usize = 4096;
/// Most flags of an environment whose bulk requests are evaluated on the
/// worker.
pub(crate) const INLINE_FLAGS: usize = 200;

/// Which evaluation endpoint a request is for.
pub(crate) enum Endpoint {
    /// One flag, by key.
    Single(String),
    /// Every flag the key may see.
    Bulk,
}

/// What one admitted request needs.
pub(crate) struct Job {
    /// The request body.
    pub body: Bytes,
    /// The environment's state when the request was admitted.
    pub state: Arc<EnvState>,
    /// What is asked.
    pub endpoint: Endpoint,
    /// Who asks.
    pub viewer: Viewer,
    /// Where evaluations are counted.
    pub usage: Arc<OfrepUsage>,
    /// The environment's name and the key's id (usage).
    pub env_name: String,
    /// The key's id.
    pub key_id: String,
    /// The change stream a bulk answer advertises.
    pub stream_uri: String,
    /// The request's `If-None-Match`.
    pub if_none_match: Option<String>,
}

/// An answer: its status, JSON body (empty for a `304`) and ETag.
pub(crate) struct Answered {
    pub status: StatusCode,
    pub body: Bytes,
    pub etag: Option<String>,
}

/// Runs `job`: on this worker when it is small, else on the blocking pool.
pub(crate) async fn run(job: Job) -> Result<Answered, Refused> {
    let small = match job.endpoint {
        Endpoint::Single(_) => true,
        Endpoint::Bulk => job.state.snapshot.len() <= INLINE_FLAGS,
    };
    if small && job.body.len() <= INLINE_BODY {
        return evaluate(job);
    }
    tokio::task::spawn_blocking(move || evaluate(job)).await.map_err(|e| {
        tracing::error!(error = %e, "an OFREP evaluation task failed");
        Refused::new(StatusCode::INTERNAL_SERVER_ERROR, "GENERAL", "internal error")
    })?
}

/// The request's context, from its body.
fn context_of(body: &[u8]) -> Result<flagstream::Context<'static>, Refused> {
    let parsed: Option<Json> = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(serde_json::from_slice(body).map_err(|e| {
            Refused::new(StatusCode::BAD_REQUEST, "PARSE_ERROR", format!("request body: {e}"))
        })?)
    };
    let ctx_json = match &parsed {
        None | Some(Json::Null) => None,
        Some(Json::Object(m)) => m.get("context"),
        Some(_) => {
            return Err(Refused::new(StatusCode::BAD_REQUEST, "PARSE_ERROR", "request body: a JSON object"));
        }
    };
    context::context(ctx_json).map_err(|e| {
        let mut r = Refused::new(StatusCode::BAD_REQUEST, "INVALID_CONTEXT", e);
        r.limit = Some("ofrep_context");
        r
    })
}

fn evaluate(job: Job) -> Result<Answered, Refused> {
    let ctx = context_of(&job.body)?;
    let snap = &job.state.snapshot;
    Ok(match job.endpoint {
        Endpoint::Single(key) => {
            let (status, mut body) = answer::single(snap, &key, &ctx, job.viewer);
            // A client-side key's 404 is not counted: it may name a flag
            // hidden from it, which must not look in use (nor may a public
            // key fill the table with names that are no flag).
            if status == StatusCode::OK || (status == StatusCode::NOT_FOUND && job.viewer == Viewer::Server) {
                let served = body.get("variant").and_then(Json::as_str).and_then(|v| v.parse().ok());
                job.usage.record(&job.env_name, &job.key_id, [(key.as_str(), served)]);
            }
            if status == StatusCode::BAD_REQUEST
                && let Some(m) = body.as_object_mut()
            {
                // A failure keeps its flag's key (OFREP's shape).
                m.insert("key".into(), Json::from(key));
            }
            Answered { status, body: Bytes::from(body.to_string()), etag: None }
        }
        Endpoint::Bulk => {
            let mut served = Vec::new();
            let (body, etag) =
                answer::bulk(snap, &ctx, &job.stream_uri, job.viewer, |key, v| served.push((key, v)));
            job.usage.record(&job.env_name, &job.key_id, served);
            match job.if_none_match.as_deref() {
                Some(inm) if answer::not_modified(inm, &etag) => {
                    Answered { status: StatusCode::NOT_MODIFIED, body: Bytes::new(), etag: Some(etag) }
                }
                _ => Answered { status: StatusCode::OK, body: Bytes::from(body), etag: Some(etag) },
            }
        }
    })
}
