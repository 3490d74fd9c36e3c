//! `flagstream.v1.Sync` on the wire: the HTTP/2 request → gRPC plumbing of
//! the one streaming method, written out so that a delivery costs as little
//! as possible.
//!
//! tonic's generated server would copy every outgoing message into the
//! stream's encode buffer and pass it through several body layers. Here the
//! request side stays tonic's (`Streaming` decodes the Hello and the acks),
//! and the response is a body that hands each pre-framed, shared
//! [`Encoded`](crate::encoded::Encoded) message to HTTP/2 as it is: one
//! reference-count increment per subscriber per message. The stream's end,
//! or an error, becomes the gRPC status trailers; an error before the
//! stream starts is a trailers-only response, as tonic would send.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use flagstream_proto::v1 as pb;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body::Frame;
use tonic::Status;
use tonic::body::Body;
use tonic::codec::{Codec, Streaming};
use tonic::server::NamedService;

use crate::subscribe::{Outgoing, SyncService};

/// The method's path.
const SUBSCRIBE: &str = "/flagstream.v1.Sync/Subscribe";

/// The Sync service as a tower service for tonic's router.
#[derive(Debug, Clone)]
pub struct SyncRoute {
    service: SyncService,
    max_request_bytes: usize,
}

impl SyncRoute {
    /// Serves `service`; request messages (Hello, acks) larger than
    /// `max_request_bytes` end the stream with `RESOURCE_EXHAUSTED`.
    pub fn new(service: SyncService, max_request_bytes: usize) -> SyncRoute {
        SyncRoute { service, max_request_bytes }
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
        let max = self.max_request_bytes;
        Box::pin(async move {
            if req.uri().path() != SUBSCRIBE {
                return Ok(Status::unimplemented(format!("no method {}", req.uri().path())).into_http());
            }
            let (parts, body) = req.into_parts();
            let decoder = tonic_prost::ProstCodec::<(), pb::SubscribeRequest>::default().decoder();
            let inbound = Streaming::new_request(decoder, body, None, Some(max));
            let request = tonic::Request::from_http(http::Request::from_parts(parts, inbound));
            Ok(match service.subscribe(request).await {
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
