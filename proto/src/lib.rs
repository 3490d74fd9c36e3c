//! The `flagstream.v1` wire contract: prost messages and tonic client/server
//! stubs generated at build time from `proto/flagstream/v1/*.proto` with a
//! vendored `protoc`. Nothing here is written by hand; the `.proto` files are
//! the single source of truth and document every field.

/// Messages and services of package `flagstream.v1`.
#[allow(missing_docs, unreachable_pub, clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("flagstream.v1");
}
