//! `Evaluate` (server-side evaluation for tools), bounded: the caller's
//! admin token is held to `quota-token-evaluates-per-sec`, the context's
//! size to the core's caps (`max-context-kinds`, `max-context-attributes`:
//! refused `INVALID_ARGUMENT` before anything is converted), and the
//! conversion and evaluation run on the blocking pool, so a large context
//! never holds one of the runtime's workers (other streams keep their
//! heartbeats and deltas).

use std::borrow::Cow;

use flagstream::{Context, FlagType, Snapshot, wire};
use flagstream_proto::v1 as pb;
use serde_json::Value as Json;
use tonic::{Request, Response, Status};

use super::convert::parts;
use super::{AdminService, authorize};
use crate::access::Role;
use crate::error::{Refusal, invalid};
use crate::store::StoreError;

impl AdminService {
    pub(super) async fn evaluate_call(
        &self,
        req: Request<pb::EvaluateRequest>,
    ) -> Result<Response<pb::EvaluateResponse>, Status> {
        let env = req.get_ref().environment.clone();
        let p = authorize(&req, Role::Read, Some(&env), "evaluate flags")?;
        let r = req.into_inner();
        let e = self.store.env(&r.environment)?;
        self.quotas.check_evaluate(&r.environment, p.name())?;
        let state = e.state.load_full();
        let stale = self.store.staleness_ms(&e) > self.stale_after_ms;
        let response = tokio::task::spawn_blocking(move || {
            let mut out = evaluate(&state.snapshot, &r)?;
            out.revision = state.revision;
            out.stale = stale;
            // The request (up to the message size limit) is dropped here
            // too, off the runtime.
            drop(r);
            Ok::<_, Status>(out)
        })
        .await
        .map_err(|cause| Refusal::TaskFailed { what: "the evaluation", cause })??;
        Ok(Response::new(response))
    }
}

/// Evaluates `r` against `snap`: the context converted (its caps checked
/// first), the default read as the requested type. `revision` and `stale`
/// are left for the caller.
pub(crate) fn evaluate(snap: &Snapshot, r: &pb::EvaluateRequest) -> Result<pb::EvaluateResponse, Status> {
    let ctx = match r.context.as_ref() {
        Some(c) => wire::context_from_proto(c).map_err(StoreError::Invalid)?,
        None => Context::new(""),
    };
    let default = match &r.default_value {
        Some(v) if v.value.is_some() => {
            wire::variation_from_proto(v).map_err(|e| invalid("default_value", e))?
        }
        _ => Json::Null,
    };
    let requested = match pb::FlagType::try_from(r.requested_type) {
        Ok(pb::FlagType::Bool) => Some(FlagType::Bool),
        Ok(pb::FlagType::String) => Some(FlagType::String),
        Ok(pb::FlagType::Int) => Some(FlagType::Int),
        Ok(pb::FlagType::Float) => Some(FlagType::Float),
        Ok(pb::FlagType::Json) => Some(FlagType::Json),
        _ => None,
    };
    let bad_default = |t: FlagType| invalid("default_value", format!("not a {} value", t.name()));
    let (value, variation, reason, version) = match requested {
        Some(t @ FlagType::Bool) => {
            parts(snap.detail(&r.flag_key, &ctx, default.as_bool().ok_or(bad_default(t))?), Json::Bool)
        }
        Some(t @ FlagType::String) => {
            parts(snap.detail(&r.flag_key, &ctx, default.as_str().ok_or(bad_default(t))?), Json::from)
        }
        Some(t @ FlagType::Int) => {
            parts(snap.detail(&r.flag_key, &ctx, default.as_i64().ok_or(bad_default(t))?), Json::from)
        }
        Some(t @ FlagType::Float) => {
            parts(snap.detail(&r.flag_key, &ctx, default.as_f64().ok_or(bad_default(t))?), Json::from)
        }
        Some(FlagType::Json) | None => {
            parts(snap.detail(&r.flag_key, &ctx, Cow::Borrowed(&default)), Cow::into_owned)
        }
    };
    let flag_type = snap.info(&r.flag_key).map(|f| f.flag_type).or(requested).unwrap_or(FlagType::Json);
    Ok(pb::EvaluateResponse {
        value: Some(wire::variation_to_proto(flag_type, &value)),
        variation_index: variation,
        reason: Some(reason),
        flag_version: version,
        revision: 0,
        stale: false,
    })
}
