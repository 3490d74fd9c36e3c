//! The `flagstream.v1` wire contract: prost messages and (with the default
//! `grpc` feature) tonic client/server stubs, generated at build time from
//! `proto/flagstream/v1/*.proto` with a vendored `protoc`. Nothing here is
//! written by hand; the `.proto` files are the single source of truth and
//! document every field. Without `grpc` the crate depends on prost alone:
//! the evaluation core links it that way.

/// Messages (and services) of package `flagstream.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    include!(concat!(env!("OUT_DIR"), "/flagstream.v1.rs"));

    /// `flagstream.v1.mirror`: the Subscribe response with items as raw
    /// bytes, for clients that hash items as received (PROTOCOL.md §3.1).
    #[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
    pub mod mirror {
        include!(concat!(env!("OUT_DIR"), "/flagstream.v1.mirror.rs"));
    }
}

/// gRPC metadata keys of the protocol (docs/PROTOCOL.md §6).
pub mod metadata {
    /// Sent with a RESOURCE_EXHAUSTED refusal: how many milliseconds to wait
    /// before trying again (a decimal integer). Nothing was done; the same
    /// request may be retried after the wait.
    pub const RETRY_AFTER_MS: &str = "flagstream-retry-after-ms";
}
