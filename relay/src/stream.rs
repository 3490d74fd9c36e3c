//! Streams: everything between an SDK's (or a replica's) connection and
//! the revisions it is sent.
//!
//! Owns the listening sockets and connection admission ([`transport`]),
//! the count-and-log layer over every gRPC status ([`refusal`]), the
//! hand-written `flagstream.v1.Sync` service ([`grpc`]), the request
//! reader with its size limits ([`inbound`]), the Subscribe stream itself
//! ([`subscribe`]: Hello, authentication by key hash, catch-up, deltas,
//! heartbeats, drain), per-token and per-environment rates ([`quota`],
//! also applied by the Admin API) and the subscriber registry ([`hub`]:
//! admission, applied revisions, the drain signal, propagation statistics
//! and this relay's identity as a node of the relay tree).
//!
//! May use `store` (the environments' state and the messages encoded
//! once in it), `access` (who a token is), `usage` (the summaries streams
//! carry), `error`, `config` and `ops`. Nothing here writes flags; the
//! cluster and the Admin API sit above it.

pub(crate) mod grpc;
pub(crate) mod hub;
pub(crate) mod inbound;
pub(crate) mod quota;
pub(crate) mod refusal;
pub(crate) mod subscribe;
pub(crate) mod transport;
