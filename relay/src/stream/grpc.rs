//! `flagstream.v1.Sync` on the wire: the HTTP/2 request → gRPC plumbing of
//! the one streaming method, written out so that a delivery costs as little
//! as possible.
//!
//! tonic's generated server would copy every outgoing message into the
//! stream's encode buffer and pass it through several body layers, and
//! decode requests through its generic streaming decoder. Here the call is
//! routed ahead of tonic's router ([`SyncFirst`]),
//! [`Inbound`] (`inbound.rs`) reads the request messages (the Hello, then acks) straight off the
//! HTTP/2 body, and the response is a body that hands each pre-framed, shared
//! [`Encoded`](crate::store::encoded::Encoded) message to HTTP/2 as it is: one
//! reference-count increment per subscriber per message. The stream's end,
//! or an error, becomes the gRPC status trailers; an error before the
//! stream starts is a trailers-only response, as tonic would send.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http_body::Frame;
use tonic::Status;
use tonic::body::Body;

use crate::error::Refusal;
use crate::stream::inbound::Inbound;
use crate::stream::subscribe::{Subscription, SyncService};

/// The method's path.
const SUBSCRIBE: &str = "/flagstream.v1.Sync/Subscribe";

/// The prefix of the service's methods' paths.
const SYNC: &str = "/flagstream.v1.Sync/";

/// The Sync service's `Subscribe` call, served ahead of tonic's router by
/// [`SyncFirst`].
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

    /// One call of the Sync service: a Subscribe stream, or a
    /// trailers-only refusal (`UNIMPLEMENTED` for any other method).
    fn call(
        &self,
        req: http::Request<Body>,
    ) -> impl Future<Output = http::Response<RouteBody>> + Send + 'static {
        let service = self.service.clone();
        let max = self.max_hello_bytes;
        async move {
            if req.uri().path() != SUBSCRIBE {
                return Status::from(Refusal::NoMethod(req.uri().path().to_owned()))
                    .into_http()
                    .map(RouteBody::Other);
            }
            let (parts, body) = req.into_parts();
            let held = service.metrics().stream_buffer_bytes.clone();
            let inbound = Inbound::new(body, max, held);
            match service.subscribe(&parts.extensions, inbound).await {
                Ok(stream) => {
                    let mut res =
                        http::Response::new(RouteBody::Subscribe(SubscribeBody { stream, done: false }));
                    res.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                    res
                }
                Err(status) => status.into_http().map(RouteBody::Other),
            }
        }
    }
}

/// Its name, as the health service reports it.
impl tonic::server::NamedService for SyncRoute {
    const NAME: &'static str = "flagstream.v1.Sync";
}

/// A layer that serves the Sync service itself and passes every other call to
/// the service it wraps (tonic's router; the Admin listener, without a
/// Sync service, passes everything).
#[derive(Debug, Clone, Default)]
pub(crate) struct SyncFirstLayer {
    sync: Option<SyncRoute>,
}

impl SyncFirstLayer {
    /// Serves `Subscribe` with `sync` (`None`: answered `UNIMPLEMENTED` by
    /// the router, as any unknown method).
    pub(crate) fn new(sync: Option<SyncRoute>) -> SyncFirstLayer {
        SyncFirstLayer { sync }
    }
}

impl<S> tower_layer::Layer<S> for SyncFirstLayer {
    type Service = SyncFirst<S>;

    fn layer(&self, inner: S) -> SyncFirst<S> {
        SyncFirst { inner, sync: self.sync.clone() }
    }
}

/// The service of [`SyncFirstLayer`]. Routing `Subscribe` here rather than
/// through tonic's router keeps its body concrete up to the refusal layer:
/// each DATA frame passes one boxed body (plus tonic's own server layer)
/// instead of four (the router's, axum's, the method's and the refusal
/// layer's).
#[derive(Debug, Clone)]
pub(crate) struct SyncFirst<S> {
    inner: S,
    sync: Option<SyncRoute>,
}

type BoxFuture<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> tower_service::Service<http::Request<Body>> for SyncFirst<S>
where
    S: tower_service::Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<RouteBody>;
    type Error = S::Error;
    type Future = BoxFuture<http::Response<RouteBody>, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if req.uri().path().starts_with(SYNC)
            && let Some(sync) = &self.sync
        {
            let response = sync.call(req);
            return Box::pin(async move { Ok(response.await) });
        }
        let response = self.inner.call(req);
        Box::pin(async move { Ok(response.await?.map(RouteBody::Other)) })
    }
}

/// A response body: a Subscribe stream's, or any other call's.
pub(crate) enum RouteBody {
    Subscribe(SubscribeBody),
    Other(Body),
}

impl http_body::Body for RouteBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.get_mut() {
            RouteBody::Subscribe(b) => Pin::new(b).poll_frame(cx),
            RouteBody::Other(b) => Pin::new(b).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            RouteBody::Subscribe(b) => b.is_end_stream(),
            RouteBody::Other(b) => b.is_end_stream(),
        }
    }

    fn size_hint(&self) -> http_body::SizeHint {
        match self {
            RouteBody::Subscribe(b) => b.size_hint(),
            RouteBody::Other(b) => b.size_hint(),
        }
    }
}

/// The response body: each message as one DATA frame, then the trailers.
/// Polling it also reads the subscriber's requests (acks).
pub(crate) struct SubscribeBody {
    stream: Subscription,
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
        let status = match ready!(self.stream.poll_next(cx)) {
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
