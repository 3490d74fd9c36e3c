//! Entry points for the fuzz targets and property tests of inbound data
//! (`tests/fuzz/`, `tests/tests/fault/inbound_fuzz.rs`): admin requests decoded
//! and converted the way the admin service does before the store plans
//! them (every op's arguments validated). Not part of the API; no
//! stability promise. None may panic or allocate without bound, whatever
//! the bytes; each returns whether the input was accepted.

use flagstream_proto::v1 as pb;
use prost::Message;

/// A `Batch` request body: decoded, every op converted as the admin
/// service does, then the flags and segments it puts validated against
/// the default limits and compiled, as the store does with the state a
/// write would produce.
pub fn admin_batch(bytes: &[u8]) -> bool {
    let Ok(req) = pb::BatchRequest::decode(bytes) else { return false };
    let mut set = flagstream::FlagSet::default();
    let mut ok = true;
    for (i, op) in req.ops.into_iter().enumerate() {
        match crate::admin::op_from_proto(i, op) {
            Ok(crate::store::Op::PutFlag { flag, .. }) => set.flags.push(flag),
            Ok(crate::store::Op::PutSegment { segment, .. }) => set.segments.push(segment),
            Ok(_) => {}
            Err(_) => ok = false,
        }
    }
    let limits = flagstream::Limits::default();
    ok && flagstream::validate::flag_set(&set, &limits).is_ok() && {
        let snap = flagstream::Snapshot::compile_unvalidated(&set, &limits);
        let ctx = flagstream::Context::new("fuzz-user").with("country", "US");
        for f in &set.flags {
            std::hint::black_box(snap.bool(&f.key, &ctx, false));
        }
        true
    }
}

/// A `PutFlag` request body: decoded and its flag converted and validated.
pub fn admin_put_flag(bytes: &[u8]) -> bool {
    let Ok(req) = pb::PutFlagRequest::decode(bytes) else { return false };
    let Some(flag) = req.flag else { return false };
    let op = pb::BatchOp {
        op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
            flag: Some(flag),
            expected_version: req.expected_version,
        })),
    };
    let batch = pb::BatchRequest { ops: vec![op], ..Default::default() };
    admin_batch(&batch.encode_to_vec())
}
