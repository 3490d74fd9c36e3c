//! OFREP, the OpenFeature Remote Evaluation Protocol, on an HTTP listener
//! of its own (`ofrep-listen`, off unless set; TLS with the relay's
//! certificate when it has one), on primaries and replicas alike (a
//! replica answers from its copy): `POST /ofrep/v1/evaluate/flags/{key}`
//! (one flag, for server-side providers) and `POST
//! /ofrep/v1/evaluate/flags` (every flag, with an ETag and `304`, for
//! static-context clients). Authenticated with an SDK key (`Authorization:
//! Bearer <key>`, a bare `Authorization: <key>`, or `X-API-Key`), which
//! sees every flag of its environment. docs/PROTOCOL.md, "OFREP".
//!
//! Owns: the request context's mapping (`context.rs`), the answers and the
//! ETag (`answer.rs`, pure), the HTTP handling with its limits
//! (`handler.rs`: body size, per-key and per-address request rates, each
//! refusal counted and logged), the change stream of server-sent events
//! (`events.rs`: spread, coalesced, replayed by `Last-Event-ID`), and the
//! evaluations counted for the usage table (`usage.rs`). Uses the store (the key's environment and
//! its snapshot), the usage table and `ops` (the bounded listener,
//! metrics).

mod answer;
mod context;
mod cors;
mod events;
mod handler;
mod usage;
mod view;

pub(crate) use handler::{Ofrep, bounds};
