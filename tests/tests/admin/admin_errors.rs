//! Bad admin input gets a clear status naming the field and the limit, and
//! leaves the store exactly as it was.

use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Relay, bool_flag, put};
use tonic::Code;

async fn state(admin: &mut flagstream_tests::relay::Admin) -> (u64, Vec<pb::Flag>) {
    let r = admin
        .list_flags(pb::ListFlagsRequest { environment: "demo".into(), ..Default::default() })
        .await
        .unwrap();
    let r = r.into_inner();
    (r.revision, r.flags)
}

/// A stale expected version is refused with FAILED_PRECONDITION naming the
/// current version and who made it; nothing changes.
#[tokio::test]
async fn stale_expected_version_conflicts() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    put(&mut admin, "demo", bool_flag("raced", true)).await.unwrap();
    put(&mut admin, "demo", bool_flag("raced", false)).await.unwrap();
    let before = state(&mut admin).await;
    let err = admin
        .put_flag(pb::PutFlagRequest {
            environment: "demo".into(),
            flag: Some(bool_flag("raced", true)),
            expected_version: Some(1),
            comment: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.message()
            .contains("expected version 1, but it is at version 2 (last changed by bootstrap at revision"),
        "{}",
        err.message()
    );
    assert_eq!(state(&mut admin).await, before);
    // Creating something that exists, with expected version 0, also conflicts.
    let err = admin
        .put_flag(pb::PutFlagRequest {
            environment: "demo".into(),
            flag: Some(bool_flag("raced", true)),
            expected_version: Some(0),
            comment: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
}

/// Invalid flags are refused with INVALID_ARGUMENT naming the field path
/// and the limit; a batch with one bad op applies nothing.
#[tokio::test]
async fn invalid_writes_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let before = state(&mut admin).await;

    let mut bad = bool_flag("bad", true);
    bad.off_variation = 7;
    let err = put(&mut admin, "demo", bad).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains(
            r#"flags["bad"].off_variation: variation index 7 out of range: the flag has 2 variations"#
        ),
        "{}",
        err.message()
    );

    let mut unknown_op = bool_flag("op", true);
    unknown_op.rules.push(pb::Rule {
        id: "r".into(),
        clauses: vec![pb::Clause {
            attribute: "a".into(),
            op: 99,
            values: vec![],
            negate: false,
            ..Default::default()
        }],
        serve: Some(pb::Serve { kind: Some(pb::serve::Kind::Variation(0)) }),
    });
    let err = put(&mut admin, "demo", unknown_op).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().contains(r#"flags["op"].rules[0].clauses[0].op: unknown operator 99"#),
        "{}",
        err.message()
    );

    let mut long = bool_flag(&"k".repeat(300), true);
    long.description.clear();
    let err = put(&mut admin, "demo", long).await.unwrap_err();
    assert!(err.message().contains(".key: 300 bytes, limit 256"), "{}", err.message());

    // A batch: one good op, one bad op → nothing applied.
    let ops = vec![
        pb::BatchOp {
            op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                flag: Some(bool_flag("good", true)),
                expected_version: None,
            })),
        },
        pb::BatchOp {
            op: Some(pb::batch_op::Op::DeleteFlag(pb::DeleteFlagOp {
                key: "no-such-flag".into(),
                expected_version: None,
            })),
        },
    ];
    let err = admin
        .batch(pb::BatchRequest {
            environment: "demo".into(),
            ops,
            expected_revision: None,
            comment: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("flag \"no-such-flag\" not found"), "{}", err.message());

    assert_eq!(state(&mut admin).await, before, "the store changed after rejected writes");
    assert!(relay.metric("flagstream_admin_writes_total{result=\"invalid\"}").await >= 3.0);
}

/// Missing or wrong credentials are UNAUTHENTICATED; an unknown environment
/// is NOT_FOUND; a bad SDK key cannot subscribe.
#[tokio::test]
async fn credentials_and_names_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut anon = flagstream_proto::v1::admin_client::AdminClient::new(relay.channel().await);
    let err = anon.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);

    let mut wrong = flagstream_proto::v1::admin_client::AdminClient::with_interceptor(
        relay.channel().await,
        flagstream_tests::relay::Token("fs_admin_nope".into()),
    );
    assert_eq!(
        wrong.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    let mut admin = relay.admin().await;
    let err = put(&mut admin, "nowhere", bool_flag("x", true)).await.unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    assert!(err.message().contains("environment \"nowhere\" not found"));

    let err = flagstream_tests::subscriber::Subscriber::connect(relay.channel().await, "fs_sdk_wrong", None)
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    assert_eq!(
        relay.metric("flagstream_subscribes_total{result=\"rejected\",reason=\"unknown_sdk_key\"}").await,
        1.0
    );
}

/// Server-side evaluation uses the SDK's engine and reports the reason.
#[tokio::test]
async fn evaluate_matches_the_engine() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let ctx = flagstream::Context::new("user-9").with("country", "US").with("plan", "enterprise");
    let r = admin
        .evaluate(pb::EvaluateRequest {
            environment: "demo".into(),
            flag_key: "new-checkout".into(),
            context: Some(flagstream::wire::context_to_proto(&ctx)),
            requested_type: pb::FlagType::Bool as i32,
            default_value: Some(pb::Variation { value: Some(pb::variation::Value::BoolValue(false)) }),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.value.unwrap().value, Some(pb::variation::Value::BoolValue(true)));
    let reason = r.reason.unwrap();
    assert_eq!((reason.kind, reason.rule_id.as_str()), (pb::ReasonKind::RuleMatch as i32, "us-enterprise"));

    // A default that does not decode is refused, naming the field; an
    // empty one is the JSON null.
    let request = |default: Option<pb::variation::Value>| pb::EvaluateRequest {
        environment: "demo".into(),
        flag_key: "no-such-flag".into(),
        context: Some(flagstream::wire::context_to_proto(&ctx)),
        requested_type: pb::FlagType::Json as i32,
        default_value: Some(pb::Variation { value: default }),
    };
    let err =
        admin.evaluate(request(Some(pb::variation::Value::JsonValue("{not json".into())))).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("default_value: invalid JSON"), "{}", err.message());
    let err = admin.evaluate(request(Some(pb::variation::Value::FloatValue(f64::NAN)))).await.unwrap_err();
    assert!(err.message().contains("default_value: NaN is not a finite float"), "{}", err.message());
    let r = admin.evaluate(request(None)).await.unwrap().into_inner();
    assert_eq!(r.value.unwrap().value, Some(pb::variation::Value::JsonValue("null".into())));
}

fn put_op(flag: pb::Flag) -> pb::BatchOp {
    pb::BatchOp {
        op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(flag), expected_version: None })),
    }
}

/// A batch error names the op it comes from (`ops[i]: ...`), conversion
/// errors included; an item named twice and a delete "expecting" version 0
/// are refused; nothing is applied.
#[tokio::test]
async fn batch_errors_name_the_op() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let before = state(&mut admin).await;
    let batch = |ops: Vec<pb::BatchOp>| pb::BatchRequest {
        environment: "demo".into(),
        ops,
        expected_revision: None,
        comment: String::new(),
    };

    let mut bad = bool_flag("bad", true);
    bad.off_variation = 7;
    let ops = vec![put_op(bool_flag("a", true)), put_op(bool_flag("b", true)), put_op(bad)];
    let err = admin.batch(batch(ops)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(
        err.message().starts_with(r#"ops[2]: flags["bad"].off_variation: variation index 7"#),
        "{}",
        err.message()
    );

    let mut bad_type = bool_flag("typed", true);
    bad_type.r#type = 42;
    let err = admin.batch(batch(vec![put_op(bool_flag("a", true)), put_op(bad_type)])).await.unwrap_err();
    assert!(err.message().starts_with("ops[1].put_flag.flag: "), "{}", err.message());

    let err = admin
        .batch(batch(vec![put_op(bool_flag("a", true)), put_op(bool_flag("a", false))]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains(r#"ops[1]: flag "a" is already named by ops[0]"#), "{}", err.message());

    let delete = pb::BatchOp {
        op: Some(pb::batch_op::Op::DeleteFlag(pb::DeleteFlagOp {
            key: "new-checkout".into(),
            expected_version: Some(0),
        })),
    };
    let err = admin.batch(batch(vec![delete])).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().starts_with("ops[0].expected_version: 0 means"), "{}", err.message());

    assert_eq!(state(&mut admin).await, before, "the store changed after rejected batches");
}

/// A page of large segments stays under the response size limit: it is cut
/// by bytes as well as by count, and the page token leads to the rest.
#[tokio::test]
async fn list_pages_are_bounded_in_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    for s in 0..8 {
        let segment = pb::Segment {
            key: format!("big-{s}"),
            included: (0..40_000).map(|i| format!("user-{s}-{i:012}-padding")).collect(),
            ..Default::default()
        };
        admin
            .put_segment(pb::PutSegmentRequest {
                environment: "demo".into(),
                segment: Some(segment),
                expected_version: None,
                comment: String::new(),
            })
            .await
            .unwrap();
    }
    let (mut seen, mut token, mut pages) = (Vec::new(), String::new(), 0);
    loop {
        let r = admin
            .list_segments(pb::ListSegmentsRequest {
                environment: "demo".into(),
                page_token: token.clone(),
                ..Default::default()
            })
            .await
            .expect("a page under the response limit")
            .into_inner();
        pages += 1;
        seen.extend(r.segments.into_iter().map(|s| s.key));
        if r.next_page_token.is_empty() {
            break;
        }
        token = r.next_page_token;
    }
    assert!(pages > 1, "eight 1.3 MB segments came in one page");
    let big: Vec<_> = seen.iter().filter(|k| k.starts_with("big-")).cloned().collect();
    assert_eq!(big, (0..8).map(|s| format!("big-{s}")).collect::<Vec<_>>());
}

/// A refusal that quotes a huge field (a flag key the validator quotes in
/// full, escaped, tens of KB) reaches the client as that refusal, its
/// message cut to 4 KiB and counted, not as an HTTP/2 protocol error
/// (`INTERNAL`) because its header outgrew what the client accepts.
#[tokio::test]
async fn a_refusal_quoting_a_huge_field_arrives_cut_not_as_a_protocol_error() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let before = state(&mut admin).await;
    let key = "\u{9c835}\n\0".repeat(2_000);
    let err = put(&mut admin, "demo", bool_flag(&key, true)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(err.message().len() <= 4_096 + 32, "{} bytes", err.message().len());
    assert!(err.message().contains(" bytes)"), "marked as cut: {}", err.message());
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"status_message_bytes\"}").await, 1.0);
    assert_eq!(state(&mut admin).await, before, "nothing stored");
    // A short refusal is not cut.
    let err = put(&mut admin, "demo", bool_flag("", true)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"status_message_bytes\"}").await, 1.0);
}
