//! The request side of a Subscribe call: gRPC-framed `SubscribeRequest`
//! messages (the Hello, then acks) read straight off the HTTP/2 body, each
//! under a size limit that tightens once the caller is known.

use bytes::{Buf, BytesMut};
use flagstream_proto::v1 as pb;
use http_body_util::BodyExt;
use prost::Message;
use tonic::Status;
use tonic::body::Body;

use crate::error::Refusal;

/// Length of the gRPC message prefix: compression flag and u32 length.
const PREFIX: usize = 5;

/// The request side of a Subscribe call: `SubscribeRequest` messages read
/// off the HTTP/2 body.
pub(crate) struct Inbound {
    body: Body,
    buf: BytesMut,
    max: usize,
    ended: bool,
}

impl Inbound {
    /// Reads request messages of at most `max` bytes off `body`.
    pub(crate) fn new(body: Body, max: usize) -> Inbound {
        Inbound { body, buf: BytesMut::new(), max, ended: false }
    }

    /// Sets the size limit for the following request messages.
    pub(crate) fn set_limit(&mut self, max: usize) {
        self.max = max;
    }

    /// The size limit for the next request message, bytes.
    pub(crate) fn limit(&self) -> usize {
        self.max
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
            match self.body.frame().await {
                // Request trailers carry nothing for us.
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
                Some(Err(status)) => return Err(status),
                None => self.ended = true,
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
        self.buf.advance(PREFIX);
        let msg = self.buf.split_to(len);
        pb::SubscribeRequest::decode(&msg[..])
            .map(Some)
            .map_err(|e| Refusal::Protocol(format!("undecodable request message: {e}")).into())
    }
}
