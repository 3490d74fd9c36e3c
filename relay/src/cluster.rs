//! The cluster: how relays keep one another current.
//!
//! Owns the replica role ([`replica`]: follows an upstream's catalog and
//! each environment's stream with the SDK's follow engine), the catalog a
//! replica needs besides flags ([`catalog`]) and its wire service
//! ([`replication`]), the PostgreSQL change feed between relays of one
//! database ([`feed`]), the relay tree reported upstream and shown by
//! `Admin.Status` ([`tree`]), and turning a replica into a primary
//! ([`promote`]).
//!
//! May use `stream` (the hub whose acks and reports it merges), `store`
//! (received revisions are applied through `store::received`), `access`,
//! `usage`, `error`, `config` and `ops`. Only the Admin API and the server
//! sit above it.

pub(crate) mod catalog;
pub(crate) mod feed;
pub(crate) mod promote;
pub(crate) mod replica;
pub(crate) mod replication;
pub(crate) mod tree;
