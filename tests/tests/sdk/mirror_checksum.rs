//! What a client in another language does (PROTOCOL.md §3.1): decode real
//! relay traffic with the mirror proto (`flagstream/v1/mirror/sync_mirror.proto`,
//! items as `bytes`), read each key with `ItemKey`, hash the bytes as
//! received with plain XXH3 per the spec, and match the relay's checksum;
//! and the published test vectors are exactly what the relay stores and
//! sends for those items.

use std::collections::BTreeMap;

use bytes::Bytes;
use flagstream_proto::v1 as pb;
use flagstream_proto::v1::mirror;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::codec::Streaming;

/// PROTOCOL.md §3.1, written from the text: XXH3-64 (seed 0) of
/// `kind_byte || key || 0x00 || item bytes`.
fn item_hash(kind: u8, key: &str, bytes: &[u8]) -> u64 {
    let mut input = vec![kind];
    input.extend_from_slice(key.as_bytes());
    input.push(0);
    input.extend_from_slice(bytes);
    xxhash_rust::xxh3::xxh3_64(&input)
}

/// Items by `(kind, key)`, as received.
type Items = BTreeMap<(u8, String), Bytes>;

fn key_of(bytes: &Bytes) -> String {
    mirror::ItemKey::decode(bytes.clone()).expect("an item decodes as ItemKey").key
}

fn checksum(items: &Items) -> u64 {
    items.iter().fold(0u64, |sum, ((kind, key), bytes)| sum.wrapping_add(item_hash(*kind, key, bytes)))
}

/// Subscribes through the generic gRPC client with the mirror response type.
async fn subscribe(
    relay: &Relay,
    sdk_key: &str,
) -> (mpsc::Sender<pb::SubscribeRequest>, Streaming<mirror::SubscribeResponse>) {
    let (tx, rx) = mpsc::channel(4);
    let hello = pb::Hello { sdk_key: sdk_key.into(), sdk_name: "mirror-test".into(), ..Default::default() };
    tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(relay.channel().await);
    grpc.ready().await.unwrap();
    let codec = tonic_prost::ProstCodec::<pb::SubscribeRequest, mirror::SubscribeResponse>::default();
    let path = http::uri::PathAndQuery::from_static("/flagstream.v1.Sync/Subscribe");
    let response = grpc.streaming(tonic::Request::new(ReceiverStream::new(rx)), path, codec).await.unwrap();
    (tx, response.into_inner())
}

async fn next_data(stream: &mut Streaming<mirror::SubscribeResponse>) -> mirror::subscribe_response::Kind {
    loop {
        let msg = tokio::time::timeout(STEP, stream.message()).await.expect("a message in time").unwrap();
        match msg.and_then(|m| m.kind).expect("stream open") {
            mirror::subscribe_response::Kind::Heartbeat(_) => continue,
            kind => return kind,
        }
    }
}

#[tokio::test]
async fn relay_traffic_decoded_with_the_mirror_matches_the_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--chunk-bytes", "16384"]).await;
    // Enough flags for several chunks.
    let key = relay.create_filled_env("big", 300, 200).await;
    let (_tx, mut stream) = subscribe(&relay, &key).await;
    let mut items = Items::new();
    let (revision, epoch) = loop {
        let mirror::subscribe_response::Kind::SnapshotChunk(c) = next_data(&mut stream).await else {
            panic!("expected snapshot chunks")
        };
        for f in &c.flags {
            items.insert((1, key_of(f)), f.clone());
        }
        for s in &c.segments {
            items.insert((2, key_of(s)), s.clone());
        }
        if c.last_chunk {
            assert!(c.total_chunks > 1, "one chunk only");
            assert_eq!(checksum(&items), c.checksum, "snapshot checksum");
            break (c.revision, c.epoch);
        }
    };
    assert_eq!(items.len(), 300);

    let mut admin = relay.admin().await;
    let mut changed = bool_flag("f-7", false);
    changed.description = "changed".into();
    let to = put(&mut admin, "big", changed).await.unwrap();
    admin
        .delete_flag(pb::DeleteFlagRequest {
            environment: "big".into(),
            key: "f-8".into(),
            expected_version: None,
            comment: String::new(),
        })
        .await
        .unwrap();
    let mut at = revision;
    while at < to + 1 {
        let mirror::subscribe_response::Kind::Delta(d) = next_data(&mut stream).await else {
            panic!("expected a delta")
        };
        assert_eq!((d.epoch.as_str(), d.from_revision), (epoch.as_str(), at));
        for f in &d.upserted_flags {
            items.insert((1, key_of(f)), f.clone());
        }
        for k in &d.deleted_flag_keys {
            items.remove(&(1, k.clone()));
        }
        assert_eq!(checksum(&items), d.checksum, "delta {} → {} checksum", d.from_revision, d.to_revision);
        at = d.to_revision;
    }
    assert_eq!(items.len(), 299);
}

/// `name=value` lines of tests/data/checksum/vectors.txt.
fn vectors() -> BTreeMap<String, String> {
    let text = include_str!("../../data/checksum/vectors.txt");
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn hash_value(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

#[tokio::test]
async fn the_published_vectors_are_what_the_relay_sends() {
    let v = vectors();
    // PROTOCOL.md publishes the same values (other-language authors copy
    // them from there).
    let spec = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/PROTOCOL.md")).unwrap();
    for name in ["flag.bytes", "flag.item_hash", "segment.bytes", "segment.item_hash", "environment.checksum"]
    {
        let value = v[name].trim_start_matches("0x");
        assert!(spec.contains(value), "PROTOCOL.md does not publish {name} = {value}");
    }
    let (flag_bytes, segment_bytes) = (hex(&v["flag.bytes"]), hex(&v["segment.bytes"]));
    // The SDK's hash and the spec's formula agree with the published values.
    for (kind, key, bytes, name) in
        [(1u8, "demo", &flag_bytes, "flag"), (2, "beta", &segment_bytes, "segment")]
    {
        let want = hash_value(&v[&format!("{name}.item_hash")]);
        assert_eq!(item_hash(kind, key, bytes), want, "{name}: spec formula");
        assert_eq!(flagstream::checksum::item_hash(kind, key, bytes), want, "{name}: SDK");
    }
    assert_eq!(xxhash_rust::xxh3::xxh3_64(b""), hash_value(&v["xxh3_64.empty"]));

    // The relay stores and sends exactly those bytes for those items.
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let key = relay.create_env("vectors").await;
    let mut flag = bool_flag("demo", true);
    flag.off_variation = 1;
    flag.description.clear();
    let segment = pb::Segment {
        key: "beta".into(),
        included: vec!["alice".into(), "bob".into()],
        ..Default::default()
    };
    let ops = vec![
        pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(flag), expected_version: None })),
        },
        pb::BatchOp {
            op: Some(pb::batch_op::Op::PutSegment(pb::PutSegmentOp {
                segment: Some(segment),
                expected_version: None,
            })),
        },
    ];
    let mut admin = relay.admin().await;
    let r = admin
        .batch(pb::BatchRequest {
            environment: "vectors".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().result.unwrap().revision, 1);
    let (_tx, mut stream) = subscribe(&relay, &key).await;
    let mirror::subscribe_response::Kind::SnapshotChunk(c) = next_data(&mut stream).await else {
        panic!("expected a snapshot")
    };
    assert_eq!(c.flags, vec![Bytes::from(flag_bytes)]);
    assert_eq!(c.segments, vec![Bytes::from(segment_bytes)]);
    assert_eq!(c.checksum, hash_value(&v["environment.checksum"]));
}
