//! `flagstream.v1.Sync` on the wire: the HTTP/2 request → gRPC plumbing of
//! the one streaming method, written out so that a delivery costs as little
//! as possible.
//!
//! tonic's generated server would copy every outgoing message into the
//! stream's encode buffer and pass it through several body layers, and
//! decode requests through its generic streaming decoder. Here
//! [`Inbound`] (`inbound.rs`) reads the request messages (the Hello, then acks) straight off the
//! HTTP/2 body, and the response is a body that hands each pre-framed, shared
//! [`Encoded`](crate::store::encoded::Encoded) message to HTTP/2 as it is: one
//! reference-count increment per subscriber per message. The stream's end,
//! or an error, becomes the gRPC status trailers; an error before the
//! stream starts is a trailers-only response, as tonic would send.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body::Frame;
use tonic::Status;
use tonic::body::Body;
use tonic::server::NamedService;

use crate::error::Refusal;
use crate::stream::inbound::Inbound;
use crate::stream::subscribe::{Outgoing, SyncService};

/// The method's path.
const SUBSCRIBE: &str = "/flagstream.v1.Sync/Subscribe";

/// The Sync service as a tower service for tonic's router.
#[derive(Debug, Clone)]
pub(crate) struct SyncRoute {
    service: SyncService,
    max_hello_bytes: usize,
}

impl SyncRoute {
    /// Serves `service`; a first request message (the Hello, read before
    /// the caller is authenticated) larger than `max_hello_bytes` ends the
    /// stream with `OUT_OF_RANGE`, so an unauthenticated stream never
    /// buffers more than that (the service raises the limit for later
    /// messages once the caller is known: [`Inbound::set_limit`]).
    pub(crate) fn new(service: SyncService, max_hello_bytes: usize) -> SyncRoute {
        SyncRoute { service, max_hello_bytes }
    }
}

impl NamedService for SyncRoute {
    const NAME: &'static str = "flagstream.v1.Sync";
}

impl tower_service::Service<http::Request<Body>> for SyncRoute {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let service = self.service.clone();
        let max = self.max_hello_bytes;
        Box::pin(async move {
            if req.uri().path() != SUBSCRIBE {
                return Ok(Status::from(Refusal::NoMethod(req.uri().path().to_owned())).into_http());
            }
            let (parts, body) = req.into_parts();
            let held = service.metrics().stream_buffer_bytes.clone();
            let inbound = Inbound::new(body, max, held);
            Ok(match service.subscribe(&parts.extensions, inbound).await {
                Ok(stream) => {
                    let mut res = http::Response::new(Body::new(SubscribeBody { stream, done: false }));
                    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                    res
                }
                Err(status) => status.into_http(),
            })
        })
    }
}

/// The response body: each message as one DATA frame, then the trailers.
struct SubscribeBody {
    stream: Outgoing,
    done: bool,
}

impl http_body::Body for SubscribeBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let status = match ready!(self.stream.as_mut().poll_next(cx)) {
            Some(Ok(msg)) => return Poll::Ready(Some(Ok(Frame::data(msg.grpc_frame())))),
            Some(Err(status)) => status,
            None => Status::ok(""),
        };
        self.done = true;
        let mut trailers = http::HeaderMap::new();
        Poll::Ready(Some(match status.add_header(&mut trailers) {
            Ok(()) => Ok(Frame::trailers(trailers)),
            // A status whose message cannot be a header value: the stream
            // fails (the client sees a reset) rather than ending as "OK".
            Err(e) => Err(e),
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }
}
