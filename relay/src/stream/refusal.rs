//! Every refusal visible: a tower layer around the whole gRPC server that
//! sees each response's final status (a Trailers-Only header, or the
//! trailers of a stream) and, for every non-OK one, counts it in
//! `flagstream_grpc_refusals_total{service, method, code}` and logs it with
//! its cause, rate-limited so a flood (a client guessing admin tokens)
//! cannot fill the disk; lines dropped by the limit are counted in the next
//! line logged.
//!
//! It is also where a request the relay could not decode becomes the
//! client's error: tonic's generated services answer a request body that
//! is not a well-formed message (garbage protobuf, a bad length prefix or
//! compression flag, a body that ends inside a message) with `INTERNAL`,
//! which PROTOCOL.md §6 keeps for the relay's own faults. Those statuses,
//! made by tonic before any handler runs, are answered `INVALID_ARGUMENT`
//! naming the decode failure and counted in
//! `flagstream_undecodable_requests_total{service, method}`
//! ([`undecodable`]).

use std::future::Future;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use http_body::Frame;
use tonic::body::Body;
use tonic::{Code, Status};

use crate::ops::metrics::Metrics;
use crate::stream::transport::ConnInfo;

/// Log lines about refusals per second (bursts up to twice that).
const LOG_PER_SECOND: u32 = 20;

/// Longest cause logged, bytes.
const MAX_CAUSE: usize = 512;

/// Longest status message sent, bytes; a longer one (a refusal quoting a
/// huge field) is cut here, marked, counted in
/// `limit_hits{limit="status_message_bytes"}`, and logged whole at debug.
/// Percent-encoded in `grpc-message` a byte may take three (12 KiB at
/// most here), and a client refuses a header block past its limit (16 KiB
/// by default in hyper's client, which tonic's uses) as a protocol error:
/// the caller would get `INTERNAL` instead of the refusal.
pub(crate) const MAX_MESSAGE: usize = 4096;

/// `status` with its message cut to [`MAX_MESSAGE`] (code, details and
/// metadata kept), or `None` if it is short enough.
fn bounded(status: &Status) -> Option<Status> {
    if status.message().len() <= MAX_MESSAGE {
        return None;
    }
    Some(Status::with_details_and_metadata(
        status.code(),
        truncate(status.message(), MAX_MESSAGE).into_owned(),
        status.details().to_vec().into(),
        status.metadata().clone(),
    ))
}

/// `s` cut to at most `max` bytes on a character boundary, marked if cut.
fn truncate(s: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if s.len() <= max {
        return s.into();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes)", &s[..end], s.len()).into()
}

/// Every method the relay serves, by service: the only label values used
/// (anything else is `unknown`, so a client cannot mint label series).
const METHODS: &[(&str, &[&str])] = &[
    ("flagstream.v1.Sync", &["Subscribe"]),
    (
        "flagstream.v1.Admin",
        &[
            "CreateEnvironment",
            "ListEnvironments",
            "DeleteEnvironment",
            "SetCorsOrigins",
            "GetFlag",
            "ListFlags",
            "PutFlag",
            "DeleteFlag",
            "PatchFlag",
            "GetSegment",
            "ListSegments",
            "PutSegment",
            "DeleteSegment",
            "PatchSegment",
            "Batch",
            "ListAudit",
            "GetPropagation",
            "WatchPropagation",
            "Evaluate",
            "Status",
            "GetUsage",
            "VerifyAudit",
            "CreateSdkKey",
            "ListSdkKeys",
            "RotateSdkKey",
            "RevokeSdkKey",
            "CreateToken",
            "ListTokens",
            "RevokeToken",
        ],
    ),
    ("flagstream.v1.Replication", &["GetCatalog"]),
    ("grpc.health.v1.Health", &["Check", "Watch"]),
];

/// `(service, method)` labels of a request path.
fn labels(path: &str) -> (&'static str, &'static str) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (service, method) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    for (s, methods) in METHODS {
        if *s == service {
            return (s, methods.iter().find(|m| **m == method).copied().unwrap_or("unknown"));
        }
    }
    ("unknown", "unknown")
}

/// The `SCREAMING_CASE` name of a gRPC code (as in the gRPC spec).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

/// What tonic's request decoding answers (with `INTERNAL`) for a request
/// body that is not one well-formed message: prost's decode error, the
/// gRPC framing errors, a body that ends inside a message or holds none.
/// The relay's own `INTERNAL` statuses (`error.rs`) never start so.
const DECODE_FAILURES: &[&str] = &[
    "failed to decode Protobuf message",
    "protocol error: received message with",
    "Unexpected EOF decoding stream",
    "Missing request message",
];

/// The client's error for a request tonic could not decode (an `INTERNAL`
/// status it made before any handler ran); `None` for any other status.
pub(crate) fn undecodable(status: &Status) -> Option<Status> {
    if status.code() != Code::Internal || !DECODE_FAILURES.iter().any(|p| status.message().starts_with(p)) {
        return None;
    }
    Some(Status::invalid_argument(format!("undecodable request message: {}", status.message())))
}

/// Counts and logs refusals; shared by every request.
#[derive(Debug)]
struct Recorder {
    metrics: Metrics,
    log: DefaultDirectRateLimiter,
    suppressed: AtomicU64,
}

impl Recorder {
    fn record(&self, status: &Status, service: &'static str, method: &'static str, peer: Option<SocketAddr>) {
        if status.code() == Code::Ok {
            return;
        }
        let code = code_name(status.code());
        let labels =
            vec![("service", service.to_owned()), ("method", method.to_owned()), ("code", code.to_owned())];
        self.metrics.refusals.get_or_create(&labels).inc();
        if self.log.check().is_err() {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let suppressed = self.suppressed.swap(0, Ordering::Relaxed);
        let peer = peer.map(|p| p.to_string()).unwrap_or_default();
        // Bounded: a rejected 10,000-op batch can have a megabyte of message.
        let cause = truncate(status.message(), MAX_CAUSE);
        match status.code() {
            // What an operator must look at: credentials, limits, failures.
            Code::Unauthenticated
            | Code::PermissionDenied
            | Code::ResourceExhausted
            | Code::OutOfRange
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
            | Code::Unknown => {
                tracing::warn!(service, method, code, cause = %cause, peer, suppressed, "request refused")
            }
            _ => tracing::info!(service, method, code, cause = %cause, peer, suppressed, "request refused"),
        }
    }
}

/// The layer: wrap the gRPC server with it.
#[derive(Debug, Clone)]
pub(crate) struct RefusalLayer {
    recorder: Arc<Recorder>,
}

impl RefusalLayer {
    /// Counts into `metrics`.
    pub(crate) fn new(metrics: Metrics) -> RefusalLayer {
        let per_second = NonZeroU32::new(LOG_PER_SECOND).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(LOG_PER_SECOND * 2).unwrap_or(NonZeroU32::MIN);
        let recorder = Arc::new(Recorder {
            metrics,
            log: RateLimiter::direct(Quota::per_second(per_second).allow_burst(burst)),
            suppressed: AtomicU64::new(0),
        });
        tokio::spawn(report_suppressed(Arc::downgrade(&recorder)));
        RefusalLayer { recorder }
    }
}

/// Once a second, says how many refusal lines the rate limit dropped since
/// the last line (so the count is never lost when a flood stops); ends
/// with the layer.
async fn report_suppressed(recorder: std::sync::Weak<Recorder>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        let Some(r) = recorder.upgrade() else { return };
        let suppressed = r.suppressed.swap(0, Ordering::Relaxed);
        if suppressed > 0 {
            tracing::warn!(suppressed, "request refused lines suppressed by the log rate limit");
        }
    }
}

impl<S> tower_layer::Layer<S> for RefusalLayer {
    type Service = Refusals<S>;

    fn layer(&self, inner: S) -> Refusals<S> {
        Refusals { inner, recorder: self.recorder.clone() }
    }
}

/// The wrapped service.
#[derive(Debug, Clone)]
pub(crate) struct Refusals<S> {
    inner: S,
    recorder: Arc<Recorder>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S, B> tower_service::Service<http::Request<Body>> for Refusals<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<B>>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = Bytes, Error = Status> + Unpin + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<http::Response<Body>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let (service, method) = labels(req.uri().path());
        let ext = req.extensions();
        let conn = ext
            .get::<ConnInfo>()
            .or_else(|| ext.get::<tonic::transport::server::TlsConnectInfo<ConnInfo>>().map(|t| t.get_ref()));
        // Held until the response (stream) ends, or the call is dropped.
        let open = conn.map(ConnInfo::request);
        let peer = conn.and_then(|c| c.remote);
        let watch = Watch { recorder: self.recorder.clone(), service, method, peer };
        let response = self.inner.call(req);
        Box::pin(async move {
            let (mut parts, body) = response.await?.into_parts();
            // Trailers-Only: the status is in the headers, the body empty.
            // A request tonic could not decode is refused this way, before
            // any handler ran.
            let watch = match Status::from_header_map(&parts.headers) {
                Some(status) => {
                    let status = match undecodable(&status) {
                        Some(client_error) => {
                            watch.undecodable();
                            match client_error.add_header(&mut parts.headers) {
                                Ok(()) => client_error,
                                // Cannot happen (the message was a header
                                // value already); the original stands.
                                Err(_) => status,
                            }
                        }
                        None => status,
                    };
                    watch.see(&status);
                    watch.bound(&status, &mut parts.headers);
                    None
                }
                None => Some(watch),
            };
            Ok(http::Response::from_parts(parts, Body::new(Observed { body, watch, _open: open })))
        })
    }
}

/// Who asked what, waiting for the response's status.
struct Watch {
    recorder: Arc<Recorder>,
    service: &'static str,
    method: &'static str,
    peer: Option<SocketAddr>,
}

impl Watch {
    fn undecodable(&self) {
        let labels = vec![("service", self.service.to_owned()), ("method", self.method.to_owned())];
        self.recorder.metrics.undecodable_requests.get_or_create(&labels).inc();
    }

    fn see(&self, status: &Status) {
        self.recorder.record(status, self.service, self.method, self.peer);
    }

    /// Cuts `status`'s message in `headers` (the response's headers or
    /// trailers) to [`MAX_MESSAGE`] if it is longer; counted.
    fn bound(&self, status: &Status, headers: &mut http::HeaderMap) {
        if let Some(cut) = bounded(status) {
            self.recorder.metrics.limit_hit("status_message_bytes");
            tracing::debug!(
                service = self.service,
                method = self.method,
                message = status.message(),
                "a status message over {MAX_MESSAGE} bytes was cut before it was sent"
            );
            if let Err(e) = cut.add_header(headers) {
                // The cut message was part of a header value already.
                tracing::warn!(error = %e, "a cut status message could not be set; the original stands");
            }
        }
    }
}

/// A response body whose trailers are looked at on their way out.
struct Observed<B> {
    body: B,
    watch: Option<Watch>,
    /// The request counted open on its connection until the body is done.
    _open: Option<crate::stream::transport::Request>,
}

impl<B: http_body::Body<Data = Bytes, Error = Status> + Unpin> http_body::Body for Observed<B> {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let mut frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if let Some(Ok(f)) = &mut frame
            && let Some(trailers) = f.trailers_mut()
            && let Some(watch) = self.watch.take()
            && let Some(status) = Status::from_header_map(trailers)
        {
            watch.see(&status);
            watch.bound(&status, trailers);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_status_message_is_cut_keeping_code_and_metadata() {
        let mut long =
            Status::invalid_argument(format!("flags[{:?}]: too long", "\u{9c835}\n\0".repeat(2_000)));
        long.metadata_mut().insert("retry-after-ms", "100".parse().unwrap());
        let cut = bounded(&long).expect("cut");
        assert_eq!(cut.code(), Code::InvalidArgument);
        assert!(cut.message().len() <= MAX_MESSAGE + 32, "{}", cut.message().len());
        assert!(cut.message().ends_with(&format!("… ({} bytes)", long.message().len())));
        assert!(cut.message().starts_with("flags["), "the start, which names the field, is kept");
        assert_eq!(cut.metadata().get("retry-after-ms").unwrap(), "100");
        // Set over the original's headers (as the layer does), the status
        // reads back cut, one value per header.
        let mut headers = http::HeaderMap::new();
        long.add_header(&mut headers).unwrap();
        cut.add_header(&mut headers).unwrap();
        assert_eq!(Status::from_header_map(&headers).unwrap().message(), cut.message());
        assert_eq!(headers.get_all("grpc-message").iter().count(), 1);
        assert_eq!(headers.get_all("retry-after-ms").iter().count(), 1);
        // Raw multi-byte text is cut on a character boundary, within the
        // bound once percent-encoded three bytes a byte.
        let wide = Status::invalid_argument("é".repeat(MAX_MESSAGE));
        let cut = bounded(&wide).expect("cut");
        assert!(cut.message().starts_with("éé"));
        assert!(cut.message().len() <= MAX_MESSAGE + 32);
        let mut headers = http::HeaderMap::new();
        cut.add_header(&mut headers).unwrap();
        assert!(headers["grpc-message"].len() <= 3 * (MAX_MESSAGE + 32), "{}", headers["grpc-message"].len());
        assert!(bounded(&Status::invalid_argument("short")).is_none());
    }

    #[test]
    fn only_tonics_decode_failures_become_the_clients_error() {
        for message in [
            "failed to decode Protobuf message: invalid wire type value: 6",
            "protocol error: received message with invalid compression flag: 2 (valid flags are 0 and 1), while sending request",
            "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            "Unexpected EOF decoding stream.",
            "Missing request message.",
        ] {
            let got = undecodable(&Status::internal(message)).expect(message);
            assert_eq!(got.code(), Code::InvalidArgument);
            assert_eq!(got.message(), format!("undecodable request message: {message}"));
        }
        // The relay's own faults stay INTERNAL; other codes are untouched.
        assert!(undecodable(&Status::internal("stored flag is corrupt")).is_none());
        assert!(undecodable(&Status::internal("the blocking task failed")).is_none());
        assert!(undecodable(&Status::unavailable("failed to decode Protobuf message")).is_none());
    }

    #[test]
    fn labels_are_a_closed_set() {
        assert_eq!(labels("/flagstream.v1.Admin/PutFlag"), ("flagstream.v1.Admin", "PutFlag"));
        assert_eq!(labels("/flagstream.v1.Admin/Guess123"), ("flagstream.v1.Admin", "unknown"));
        assert_eq!(labels("/evil.Service/X"), ("unknown", "unknown"));
        assert_eq!(labels(""), ("unknown", "unknown"));
    }
}
