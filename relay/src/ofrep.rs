//! OFREP, the OpenFeature Remote Evaluation Protocol, on an HTTP listener
//! of its own (`ofrep-listen`, off unless set; TLS with the relay's
//! certificate when it has one), on primaries and replicas alike (a
//! replica answers from its copy): `POST /ofrep/v1/evaluate/flags/{key}`
//! (one flag, for server-side providers), `POST /ofrep/v1/evaluate/flags`
//! (every flag, with an ETag and `304`, for static-context clients) and
//! `GET /ofrep/v1/events` (the change stream). Authenticated with a key of
//! the environment (`Authorization: Bearer <key>`, a bare `Authorization:
//! <key>`, or `X-API-Key`): a server-side SDK key sees every flag, a
//! client-side key (browsers, apps) only the flags visible to clients.
//! Pages call it from the origins their environment lists (CORS).
//! docs/PROTOCOL.md §11.
//!
//! Owns: the request context's mapping (`context.rs`), the answers, what
//! each kind of key sees and the ETag (`answer.rs`, pure), the HTTP
//! handling with its limits (`handler.rs`: body size, per-key and
//! per-address request rates, each refusal counted and logged), one
//! request's evaluation (`job.rs`: on the worker when small, on the
//! blocking pool otherwise), CORS (`cors.rs`), the change stream of
//! server-sent events (`events.rs`: spread, coalesced, replayed by
//! `Last-Event-ID`), what a client-side key's stream follows (`view.rs`),
//! and the evaluations counted for the usage table (`usage.rs`). Uses the
//! store (the key's environment, its snapshot and origins), the usage
//! table and `ops` (the bounded listener, metrics).

mod answer;
mod context;
mod cors;
mod events;
mod handler;
mod job;
mod usage;
mod view;

pub(crate) use handler::{Ofrep, bounds};
