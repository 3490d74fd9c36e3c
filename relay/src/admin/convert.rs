//! Admin messages to store operations and back: items, write results,
//! environments, batch operations (each error naming the request field)
//! and evaluation details.

use flagstream::{Detail, FromValue, Reason, wire};
use flagstream_proto::v1 as pb;
use serde_json::Value as Json;
use tonic::Status;

use crate::error::invalid;
use crate::store::state::Kind;
use crate::store::{Env, Op, WriteResult};

pub(super) fn kind_to_proto(k: Kind) -> pb::ItemKind {
    match k {
        Kind::Flag => pb::ItemKind::Flag,
        Kind::Segment => pb::ItemKind::Segment,
    }
}

pub(super) fn result_to_proto(r: &WriteResult) -> pb::WriteResult {
    pb::WriteResult {
        revision: r.revision,
        items: r
            .items
            .iter()
            .map(|i| pb::ItemVersion {
                kind: kind_to_proto(i.kind) as i32,
                key: i.key.clone(),
                version: i.version,
                deleted: i.deleted,
            })
            .collect(),
    }
}

pub(super) fn env_to_proto(env: &Env) -> pb::Environment {
    let meta = env.meta.load();
    let state = env.state.load();
    pb::Environment {
        name: meta.name.clone(),
        description: meta.description.clone(),
        epoch: meta.epoch.clone(),
        revision: state.revision,
        flag_count: state.totals().flags as u64,
        segment_count: state.totals().segments as u64,
        created_unix_ms: meta.created_unix_ms,
        cors_origins: meta.cors_origins.clone(),
    }
}

/// Converts one batch operation.
pub(crate) fn op_from_proto(i: usize, op: pb::BatchOp) -> Result<Op, Status> {
    use pb::batch_op::Op as B;
    let path = format!("ops[{i}]");
    Ok(match op.op.ok_or_else(|| invalid(&path, "empty operation"))? {
        B::PutFlag(p) => Op::PutFlag {
            flag: flag_arg(&format!("{path}.put_flag.flag"), p.flag)?,
            expected: p.expected_version,
        },
        B::DeleteFlag(d) => Op::DeleteFlag { key: d.key, expected: d.expected_version },
        B::PutSegment(p) => Op::PutSegment {
            segment: segment_arg(&format!("{path}.put_segment.segment"), p.segment)?,
            expected: p.expected_version,
        },
        B::DeleteSegment(d) => Op::DeleteSegment { key: d.key, expected: d.expected_version },
        B::PatchFlag(p) => Op::PatchFlag { key: p.key, expected: p.expected_version, patches: p.ops },
        B::PatchSegment(p) => Op::PatchSegment { key: p.key, expected: p.expected_version, patches: p.ops },
    })
}

pub(super) fn flag_arg(path: &str, f: Option<pb::Flag>) -> Result<flagstream::Flag, Status> {
    let f = f.ok_or_else(|| invalid(path, "missing"))?;
    wire::flag_from_proto(&f).map_err(|e| invalid(path, e))
}

pub(super) fn segment_arg(path: &str, s: Option<pb::Segment>) -> Result<flagstream::Segment, Status> {
    let s = s.ok_or_else(|| invalid(path, "missing"))?;
    wire::segment_from_proto(&s).map_err(|e| invalid(path, e))
}

pub(super) fn parts<'s, T: FromValue<'s>>(
    d: Detail<'s, T>,
    to_json: impl Fn(T) -> Json,
) -> (Json, Option<u32>, pb::Reason, u64) {
    (to_json(d.value), d.variation, reason_to_proto(&d.reason), d.flag_version)
}

/// The protobuf form of a reason.
pub(crate) fn reason_to_proto(r: &Reason<'_>) -> pb::Reason {
    use pb::ReasonKind as K;
    let mut out = pb::Reason::default();
    match r {
        Reason::Off => out.kind = K::Off as i32,
        Reason::TargetMatch => out.kind = K::TargetMatch as i32,
        Reason::RuleMatch { index, id, step } => {
            out.kind = K::RuleMatch as i32;
            out.rule_index = *index;
            out.rule_id = (*id).to_owned();
            out.schedule_step = *step;
        }
        Reason::Fallthrough { step, .. } => {
            out.kind = K::Fallthrough as i32;
            out.schedule_step = *step;
        }
        Reason::PrerequisiteFailed { key } => {
            out.kind = K::PrerequisiteFailed as i32;
            out.prerequisite_key = (*key).to_owned();
        }
        Reason::Error(e) => {
            out.kind = K::Error as i32;
            out.error = match e {
                flagstream::ErrorKind::FlagNotFound => pb::ErrorKind::FlagNotFound,
                flagstream::ErrorKind::WrongType => pb::ErrorKind::WrongType,
                flagstream::ErrorKind::MalformedFlag => pb::ErrorKind::MalformedFlag,
                flagstream::ErrorKind::NotReady => pb::ErrorKind::NotReady,
            } as i32;
        }
    }
    out
}
