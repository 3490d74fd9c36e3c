//! The request side of a Subscribe call: gRPC-framed `SubscribeRequest`
//! messages (the Hello, then acks) read straight off the HTTP/2 body, each
//! under a size limit that tightens once the caller is known.
//!
//! A stream's buffer holds what it holds now, not the largest message it
//! ever received: once a message larger than [`RETAIN_BYTES`] has been
//! decoded, what follows it is copied into a fresh, small buffer and the
//! large allocation is freed; and a message larger than that, once begun,
//! must be complete within [`LARGE_MESSAGE_DEADLINE`] (else the stream
//! ends with `DEADLINE_EXCEEDED`), so no stream holds a large buffer
//! longer than that by never finishing its message. The bytes every
//! stream's buffer holds are the `stream_buffer_bytes` gauge.

use bytes::{Buf, BytesMut};
use flagstream_proto::v1 as pb;
use http_body_util::BodyExt;
use prometheus_client::metrics::gauge::Gauge;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use crate::error::Refusal;

/// Length of the gRPC message prefix: compression flag and u32 length.
const PREFIX: usize = 5;

/// Buffer capacity a stream keeps between messages, bytes: an ack, a
/// report or a small usage summary fits (an HTTP/2 DATA frame is at most
/// 16 KiB by default); past it the buffer is released after the message.
pub(crate) const RETAIN_BYTES: usize = 16 * 1024;

/// How long a request message larger than [`RETAIN_BYTES`] may take to
/// arrive once begun (a 1 MiB usage summary needs milliseconds).
pub(crate) const LARGE_MESSAGE_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

/// The request side of a Subscribe call: `SubscribeRequest` messages read
/// off the HTTP/2 body.
pub(crate) struct Inbound {
    body: Body,
    buf: BytesMut,
    max: usize,
    ended: bool,
    /// Every stream's buffered bytes (capacity), and this one's share.
    held: Gauge,
    counted: usize,
    /// When the large message being buffered must be complete.
    large_until: Option<tokio::time::Instant>,
}

impl Inbound {
    /// Reads request messages of at most `max` bytes off `body`, counting
    /// the buffer's capacity in `held`.
    pub(crate) fn new(body: Body, max: usize, held: Gauge) -> Inbound {
        Inbound { body, buf: BytesMut::new(), max, ended: false, held, counted: 0, large_until: None }
    }

    /// Sets the size limit for the following request messages.
    pub(crate) fn set_limit(&mut self, max: usize) {
        self.max = max;
    }

    /// The size limit for the next request message, bytes.
    pub(crate) fn limit(&self) -> usize {
        self.max
    }

    /// The buffer's capacity, bytes (what this stream holds between reads).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// The next request message; `None` when the client half-closed. A
    /// message over the size limit is `OUT_OF_RANGE` (not to be retried unchanged; nothing of it
    /// is buffered beyond its prefix), a compressed or undecodable one
    /// `INVALID_ARGUMENT`.
    pub(crate) async fn message(&mut self) -> Result<Option<pb::SubscribeRequest>, Status> {
        loop {
            if let Some(msg) = self.buffered()? {
                return Ok(Some(msg));
            }
            if self.ended {
                return match self.buf.is_empty() {
                    true => Ok(None),
                    false => Err(Refusal::Protocol("request stream ended inside a message".into()).into()),
                };
            }
            let frame = match self.large_deadline() {
                None => self.body.frame().await,
                Some(until) => match tokio::time::timeout_at(until, self.body.frame()).await {
                    Ok(frame) => frame,
                    Err(_) => {
                        return Err(Refusal::TooSlow(
                            "a request message over 16 KiB was not complete within 10 s of its start",
                        )
                        .into());
                    }
                },
            };
            match frame {
                // Request trailers carry nothing for us.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                        self.count();
                    }
                }
                Some(Err(status)) => return Err(status),
                None => self.ended = true,
            }
        }
    }

    /// The deadline of the message being buffered, when it is a large one
    /// (set when its prefix is first seen, cleared once it is complete).
    fn large_deadline(&mut self) -> Option<tokio::time::Instant> {
        let len = self.buf.get(1..PREFIX).map(|p| u32::from_be_bytes([p[0], p[1], p[2], p[3]]) as usize);
        match len {
            Some(len) if len > RETAIN_BYTES => Some(
                *self.large_until.get_or_insert_with(|| tokio::time::Instant::now() + LARGE_MESSAGE_DEADLINE),
            ),
            _ => {
                self.large_until = None;
                None
            }
        }
    }

    /// A complete message from the buffer, if one is there.
    fn buffered(&mut self) -> Result<Option<pb::SubscribeRequest>, Status> {
        let Some(prefix) = self.buf.get(..PREFIX) else { return Ok(None) };
        if prefix[0] != 0 {
            return Err(Refusal::Protocol("compressed request messages are not supported".into()).into());
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > self.max {
            return Err(Refusal::MessageTooLarge { len, max: self.max }.into());
        }
        if self.buf.len() < PREFIX + len {
            return Ok(None);
        }
        let decoded = pb::SubscribeRequest::decode(&self.buf[PREFIX..PREFIX + len]);
        self.buf.advance(PREFIX + len);
        self.large_until = None;
        self.release();
        decoded.map(Some).map_err(|e| Refusal::Protocol(format!("undecodable request message: {e}")).into())
    }

    /// After a message: a buffer grown past [`RETAIN_BYTES`] gives its
    /// allocation back, keeping only what is buffered of the next message
    /// (copied; at most what arrived in the same frames).
    fn release(&mut self) {
        if self.counted > RETAIN_BYTES && self.buf.len() <= RETAIN_BYTES {
            self.buf = BytesMut::from(&self.buf[..]);
            let now = self.buf.capacity();
            self.adjust(now);
        }
    }

    /// Brings the gauge up to date with the buffer's allocation. Advancing
    /// past a message leaves its bytes in the allocation (they count until
    /// [`release`](Self::release)); a grown buffer counts its new capacity.
    fn count(&mut self) {
        let now = self.buf.capacity();
        if now > self.counted {
            self.adjust(now);
        }
    }

    fn adjust(&mut self, now: usize) {
        if now > self.counted {
            self.held.inc_by((now - self.counted) as i64);
        } else {
            self.held.dec_by((self.counted - now) as i64);
        }
        self.counted = now;
    }
}

impl Drop for Inbound {
    fn drop(&mut self) {
        self.adjust(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body::Frame;

    fn framed(msg: &pb::SubscribeRequest) -> Vec<u8> {
        let body = msg.encode_to_vec();
        let mut out = vec![0u8];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    fn ack(revision: u64) -> pb::SubscribeRequest {
        let ack = pb::Ack { epoch: "e".into(), revision, ..Default::default() };
        pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Ack(ack)) }
    }

    /// A body delivering `bytes` in HTTP/2-sized (16 KiB) DATA frames.
    fn body(bytes: Vec<u8>) -> Body {
        let frames: Vec<Result<Frame<Bytes>, Status>> =
            bytes.chunks(16 * 1024).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
        Body::new(http_body_util::StreamBody::new(futures_util::stream::iter(frames)))
    }

    #[tokio::test]
    async fn a_large_message_leaves_no_large_buffer_behind() {
        let usage = pb::UsageSummary { flags: vec![Default::default(); 1], ..Default::default() };
        let mut big = pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Usage(usage)) };
        if let Some(pb::subscribe_request::Kind::Usage(u)) = &mut big.kind {
            u.flags[0].key = "k".repeat(900_000);
        }
        let mut wire = framed(&big);
        wire.extend(framed(&ack(1)));
        wire.extend(framed(&ack(2)));
        let held = Gauge::default();
        let mut inbound = Inbound::new(body(wire), 1 << 20, held.clone());
        let first = inbound.message().await.unwrap().unwrap();
        assert_eq!(first, big);
        assert!(inbound.capacity() <= RETAIN_BYTES, "kept {} bytes after the message", inbound.capacity());
        assert!(held.get() as usize <= RETAIN_BYTES, "gauge says {}", held.get());
        assert_eq!(inbound.message().await.unwrap().unwrap(), ack(1));
        assert_eq!(inbound.message().await.unwrap().unwrap(), ack(2));
        assert!(inbound.message().await.unwrap().is_none());
        drop(inbound);
        assert_eq!(held.get(), 0, "a dropped stream counts nothing");
    }

    #[tokio::test]
    async fn the_gauge_counts_a_large_message_while_it_arrives() {
        let held = Gauge::default();
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&(600_000u32).to_be_bytes());
        prefix.extend(vec![0u8; 300_000]);
        let mut inbound = Inbound::new(body(prefix), 1 << 20, held.clone());
        // The body ends inside the message: an error, after it was buffered.
        assert!(inbound.message().await.is_err());
        assert!(held.get() >= 300_000, "gauge says {}", held.get());
    }

    /// A large message begun and never finished ends the stream after the
    /// deadline, instead of holding its buffer for as long as it stays open.
    #[tokio::test(start_paused = true)]
    async fn a_large_message_left_unfinished_ends_the_stream() {
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&(600_000u32).to_be_bytes());
        prefix.extend(vec![0u8; 300_000]);
        let frames = futures_util::stream::iter(
            prefix
                .chunks(16 * 1024)
                .map(|c| Ok::<_, Status>(Frame::data(Bytes::copy_from_slice(c))))
                .collect::<Vec<_>>(),
        );
        // The rest never comes: the body stays open.
        let body = Body::new(http_body_util::StreamBody::new(futures_util::StreamExt::chain(
            frames,
            futures_util::stream::pending(),
        )));
        let mut inbound = Inbound::new(body, 1 << 20, Gauge::default());
        let err = inbound.message().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::DeadlineExceeded, "{err:?}");
        assert!(err.message().contains("within 10 s"), "{}", err.message());
    }
}
