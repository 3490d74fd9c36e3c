//! Regular expressions (a write token) are bounded: a write with more
//! `matches` patterns in one flag than `max_regex_patterns`, or a pattern
//! whose compiled size is over `max_regex_compiled`, is refused
//! INVALID_ARGUMENT naming the field path and the limit, nothing stored
//! changes, and the limit hit is counted.

use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Admin, Relay, bool_flag, put};
use tonic::Code;

/// A bool flag with one rule matching `plan` against `patterns`.
fn regex_flag(key: &str, patterns: &[String]) -> pb::Flag {
    let mut f = flagstream::wire::flag_from_proto(&bool_flag(key, true)).unwrap();
    f.rules.push(flagstream::model::Rule {
        id: "r".into(),
        clauses: vec![flagstream::model::Clause {
            context_kind: String::new(),
            attribute: "plan".into(),
            op: flagstream::model::Operator::Matches,
            values: patterns.iter().map(|p| serde_json::Value::from(p.as_str())).collect(),
            negate: false,
        }],
        serve: flagstream::model::Serve::variation(1),
    });
    flagstream::wire::flag_to_proto(&f)
}

async fn head(admin: &mut Admin) -> u64 {
    let s = admin.status(pb::StatusRequest {}).await.unwrap().into_inner();
    s.environments.iter().find(|e| e.name == "a").unwrap().head_revision
}

async fn stored(admin: &mut Admin, key: &str) -> Option<pb::Flag> {
    let r = admin.get_flag(pb::GetFlagRequest { environment: "a".into(), key: key.into() }).await;
    match r {
        Ok(r) => r.into_inner().flag,
        Err(e) if e.code() == Code::NotFound => None,
        Err(e) => panic!("{e:?}"),
    }
}

#[tokio::test]
async fn writes_over_the_regex_limits_are_refused_and_store_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    relay.create_env("a").await;
    let mut admin = relay.admin().await;
    let hundred: Vec<String> = (0..100).map(|i| format!("^plan-{i}$")).collect();
    put(&mut admin, "a", regex_flag("rx", &hundred)).await.expect("100 patterns are within the limit");
    let before = (head(&mut admin).await, stored(&mut admin, "rx").await);

    // 101 patterns in the flag.
    let mut many = hundred.clone();
    many.push("^plan-extra$".into());
    let e = put(&mut admin, "a", regex_flag("rx", &many)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(r#"flags["rx"]: 101 regex patterns, limit 100 (max_regex_patterns)"#),
        "{}",
        e.message()
    );

    // One pattern too large to compile within its limit.
    let e = put(&mut admin, "a", regex_flag("rx", &[r"\w{1000}".to_owned()])).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(
            r#"flags["rx"].rules[0].clauses[0].values[0]: compiled regex over 1048576 bytes (max_regex_compiled)"#
        ),
        "{}",
        e.message()
    );

    // Nothing changed, and each limit hit was counted.
    assert_eq!((head(&mut admin).await, stored(&mut admin, "rx").await), before);
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_regex_patterns\"}").await, 1.0);
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_regex_compiled\"}").await, 1.0);
}
