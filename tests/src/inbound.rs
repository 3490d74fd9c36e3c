//! The bodies of the fuzz targets (`tests/fuzz/`) and of the property
//! tests that run them in CI (`tests/tests/fault/inbound_fuzz.rs`): every kind
//! of inbound data, decoded, validated and compiled the way the product
//! does it. Each takes arbitrary bytes and must neither panic nor allocate
//! without bound; each returns whether the input was accepted.

use flagstream::{Context, FlagSet, Limits, Snapshot};
use flagstream_proto::v1 as pb;
use prost::Message;

pub use flagstream::fuzz::{cache_blob, subscribe_response};
pub use flagstream_relay::fuzz::{admin_batch, admin_put_flag};

/// A flag file (`flagctl export` format, YAML or JSON), as an SDK's
/// offline mode or `flagctl import` reads it: parsed, validated, compiled,
/// every flag evaluated.
pub fn flag_file(bytes: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(bytes) else { return false };
    // Bounded like a file read: the parsers see at most this much.
    if text.len() > 1 << 20 {
        return false;
    }
    let set: FlagSet = match serde_yaml_ng::from_str(text).or_else(|_| serde_json::from_str(text)) {
        Ok(s) => s,
        Err(_) => return false,
    };
    match Snapshot::compile(&set, &Limits::default()) {
        Ok(snap) => {
            evaluate_all(&snap);
            true
        }
        Err(_) => false,
    }
}

/// A `Flag` message as it arrives in a write or a stream: decoded,
/// converted to the model, validated and compiled.
pub fn flag_message(bytes: &[u8]) -> bool {
    let Ok(p) = pb::Flag::decode(bytes) else { return false };
    let Ok(flag) = flagstream::wire::flag_from_proto(&p) else { return false };
    let set = FlagSet { flags: vec![flag], segments: Vec::new() };
    match Snapshot::compile(&set, &Limits::default()) {
        Ok(snap) => {
            evaluate_all(&snap);
            true
        }
        Err(_) => false,
    }
}

/// A `SubscribeRequest` as the relay decodes it (what it then does with a
/// Hello needs a running relay: the property test sends those to one).
pub fn subscribe_request(bytes: &[u8]) -> bool {
    pb::SubscribeRequest::decode(bytes).is_ok()
}

fn evaluate_all(snap: &Snapshot) {
    let ctx = Context::new("fuzz-user").with("country", "US").with("plan", "enterprise");
    let keys: Vec<String> = snap.keys().map(str::to_owned).collect();
    for k in &keys {
        std::hint::black_box((snap.bool(k, &ctx, false), snap.int(k, &ctx, 0), snap.string(k, &ctx, "")));
    }
}

/// Valid inputs for `target`, built from the evaluation suite's flag sets
/// (`tests/data/eval`): what the mutations start from.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    use flagstream::wire::{flag_to_proto, segment_to_proto};
    let sets: Vec<FlagSet> = crate::case::load_all()
        .into_iter()
        .filter(|(_, f)| f.validate)
        .map(|(_, f)| FlagSet { flags: f.flags, segments: f.segments })
        .collect();
    let flags = |set: &FlagSet| -> Vec<bytes::Bytes> {
        set.flags.iter().map(|f| flag_to_proto(f).encode_to_vec().into()).collect()
    };
    let segments = |set: &FlagSet| -> Vec<bytes::Bytes> {
        set.segments.iter().map(|s| segment_to_proto(s).encode_to_vec().into()).collect()
    };
    let put = |f: &flagstream::Flag| pb::BatchOp {
        op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
            flag: Some(flag_to_proto(f)),
            expected_version: None,
        })),
    };
    match target {
        "subscribe_request" => vec![
            pb::SubscribeRequest {
                kind: Some(pb::subscribe_request::Kind::Hello(pb::Hello {
                    sdk_key: "fs_sdk_seed".into(),
                    cursor: Some(pb::Cursor { epoch: "e".into(), revision: 3 }),
                    sdk_name: "seed".into(),
                    ..Default::default()
                })),
            }
            .encode_to_vec(),
            pb::SubscribeRequest {
                kind: Some(pb::subscribe_request::Kind::Ack(pb::Ack {
                    epoch: "e".into(),
                    revision: 4,
                    apply_duration_us: 9,
                    held_us: 0,
                })),
            }
            .encode_to_vec(),
        ],
        "subscribe_response" => sets
            .iter()
            .map(|set| {
                let chunk = pb::SnapshotChunk {
                    epoch: "e".into(),
                    revision: 1,
                    total_chunks: 1,
                    last_chunk: true,
                    flags: set.flags.iter().map(flag_to_proto).collect(),
                    segments: set.segments.iter().map(segment_to_proto).collect(),
                    ..Default::default()
                };
                pb::SubscribeResponse { kind: Some(pb::subscribe_response::Kind::SnapshotChunk(chunk)) }
                    .encode_to_vec()
            })
            .collect(),
        "admin_batch" => sets
            .iter()
            .map(|set| {
                let segments = set.segments.iter().map(|seg| pb::BatchOp {
                    op: Some(pb::batch_op::Op::PutSegment(pb::PutSegmentOp {
                        segment: Some(segment_to_proto(seg)),
                        expected_version: None,
                    })),
                });
                let ops = segments.chain(set.flags.iter().map(put)).collect();
                pb::BatchRequest { environment: "e".into(), ops, ..Default::default() }.encode_to_vec()
            })
            .collect(),
        // Single flags: those that stand alone (no segment or prerequisite
        // elsewhere in their set).
        "admin_put_flag" | "flag_message" => sets
            .iter()
            .flat_map(|set| set.flags.iter())
            .filter(|f| flag_message(&flag_to_proto(f).encode_to_vec()))
            .map(|f| match target {
                "flag_message" => flag_to_proto(f).encode_to_vec(),
                _ => pb::PutFlagRequest {
                    environment: "e".into(),
                    flag: Some(flag_to_proto(f)),
                    ..Default::default()
                }
                .encode_to_vec(),
            })
            .collect(),
        "flag_file" => sets
            .iter()
            .map(|set| serde_yaml_ng::to_string(set).expect("a flag set serialises").into_bytes())
            .collect(),
        "cache_blob" => sets
            .iter()
            .filter_map(|set| flagstream::fuzz::cache_blob_seed(flags(set), segments(set)))
            .collect(),
        other => panic!("no target {other}"),
    }
}

/// A target: takes any bytes, says whether they were accepted.
pub type Target = fn(&[u8]) -> bool;

/// Every target by name (for the fuzz crate and the property test).
pub const TARGETS: &[(&str, Target)] = &[
    ("subscribe_request", subscribe_request),
    ("subscribe_response", subscribe_response),
    ("admin_batch", admin_batch),
    ("admin_put_flag", admin_put_flag),
    ("flag_message", flag_message),
    ("flag_file", flag_file),
    ("cache_blob", cache_blob),
];
