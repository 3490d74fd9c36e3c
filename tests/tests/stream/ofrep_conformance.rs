//! The data-driven evaluation suite (`tests/data/eval`) through OFREP's
//! single-flag endpoint of a real relay: each file's flags and segments
//! written to an environment of their own, each case asked for over HTTP
//! with its context in OFREP's form, the answer's value (JSON types
//! exact, in the flag's own type: OFREP has no requested type, so a float
//! requested of an int flag is checked as the integer), variant and
//! OpenFeature reason checked against the case.
//!
//! What OFREP cannot carry is left out, and counted: files whose flags do
//! not validate (a relay stores only valid flags), cases evaluated at
//! another time (`now`: OFREP evaluates at the relay's clock) and cases
//! whose expected error is the requested type's (`WRONG_TYPE`: OFREP has
//! no requested type; its clients check the type).

use flagstream::wire;
use flagstream_proto::v1 as pb;
use flagstream_tests::case::load_all;
use flagstream_tests::ofrep::{context_json, post};
use flagstream_tests::relay::Relay;
use serde_json::{Value as Json, json};

/// The OpenFeature reason OFREP answers for a case's expected result.
fn reason(expect: &str, flag: &flagstream::Flag, step: Option<u32>) -> &'static str {
    match expect {
        "OFF" | "PREREQUISITE_FAILED" => "DISABLED",
        "TARGET_MATCH" | "RULE_MATCH" => "TARGETING_MATCH",
        "FALLTHROUGH" if flag.fallthrough.rollout.is_some() || step.is_some() => "SPLIT",
        "FALLTHROUGH" => "DEFAULT",
        _ => "ERROR",
    }
}

#[tokio::test]
async fn the_evaluation_suite_through_the_single_flag_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        dir.path(),
        &[
            "--ofrep-listen",
            "127.0.0.1:0",
            "--ofrep-requests-per-sec-per-key",
            "100000",
            "--ofrep-requests-per-sec-per-address",
            "100000",
        ],
    )
    .await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let mut admin = relay.admin().await;
    let (mut checked, mut skipped_files, mut skipped_cases) = (0usize, 0usize, 0usize);
    let mut problems = Vec::new();
    for (i, (name, file)) in load_all().into_iter().enumerate() {
        if !file.validate {
            skipped_files += 1;
            continue;
        }
        let env = format!("suite-{i}");
        let key = relay.create_env(&env).await;
        let ops = file
            .segments
            .iter()
            .map(|s| {
                pb::batch_op::Op::PutSegment(pb::PutSegmentOp {
                    segment: Some(wire::segment_to_proto(s)),
                    expected_version: None,
                })
            })
            .chain(file.flags.iter().map(|f| {
                pb::batch_op::Op::PutFlag(pb::PutFlagOp {
                    flag: Some(wire::flag_to_proto(f)),
                    expected_version: None,
                })
            }))
            .map(|op| pb::BatchOp { op: Some(op) })
            .collect();
        admin
            .batch(pb::BatchRequest {
                environment: env.clone(),
                ops,
                expected_revision: None,
                comment: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{name}: the relay takes the file's flags: {e}"));
        let bearer = format!("Bearer {key}");
        for case in &file.cases {
            if case.now.is_some() || case.expect.error.as_deref() == Some("WRONG_TYPE") {
                skipped_cases += 1;
                continue;
            }
            let body = json!({ "context": context_json(&case.context) }).to_string();
            let r = post(
                addr,
                &format!("/ofrep/v1/evaluate/flags/{}", case.flag),
                &[("Authorization", bearer.as_str())],
                &body,
            )
            .await;
            checked += 1;
            let got = r.json();
            let Some(flag) = file.flags.iter().find(|f| f.key == case.flag) else {
                if (r.status, got["errorCode"].clone()) != (404, json!("FLAG_NOT_FOUND")) {
                    problems.push(format!("{}: a missing flag answered {} {got}", case.name, r.status));
                }
                continue;
            };
            // OFREP answers in the flag's own type (it has no requested
            // type): a number flag's value is a float, an int flag's an
            // integer even where the case asked for a float.
            let mut want_value = case.expect.value.clone();
            match flag.flag_type {
                flagstream::FlagType::Float => {
                    want_value = want_value.as_f64().map_or(want_value, Json::from)
                }
                flagstream::FlagType::Int if want_value.is_f64() => {
                    let f = want_value.as_f64().expect("an f64 (checked above)");
                    want_value = Json::from(f as i64);
                }
                _ => {}
            }
            let want = json!({
                "value": want_value,
                "variant": case.expect.variation.map(|v| v.to_string()),
                "reason": reason(&case.expect.reason, flag, case.expect.schedule_step),
            });
            let have = json!({ "value": got["value"], "variant": got.get("variant").cloned().unwrap_or(Json::Null), "reason": got["reason"] });
            // JSON equality: `1` and `1.0` differ (serde_json keeps the
            // integer and float forms apart), as the clients see them.
            if r.status != 200 || want != have {
                problems.push(format!("{} ({name}): expected {want}, got {} {got}", case.name, r.status));
            }
        }
    }
    assert!(problems.is_empty(), "{} of {checked} cases differ:\n{}", problems.len(), problems.join("\n"));
    assert!(
        checked >= 800,
        "only {checked} cases checked ({skipped_cases} skipped, {skipped_files} files skipped)"
    );
    println!(
        "{checked} cases checked through OFREP; {skipped_cases} cases and {skipped_files} files outside OFREP"
    );
}
