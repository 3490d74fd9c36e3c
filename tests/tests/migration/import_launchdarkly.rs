//! `flagctl import launchdarkly` into a real relay: LaunchDarkly's SDK data
//! becomes flags and segments that the Rust SDK evaluates to the variation
//! LaunchDarkly's own tests expect for the same context (its bucketing
//! tests' flag key, salt, seed and users); what cannot be carried exactly
//! is reported, not imported; the same file again is a no-op.

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use serde_json::{Value as Json, json};

use crate::{outcome, report};

/// LaunchDarkly's data: the flags of its bucketing tests, targets, rules,
/// a prerequisite, a weighted segment, and four things flagstream does
/// not carry (a flag with no off variation, a big segment, an operator it
/// does not have, a pattern its validation refuses).
fn launchdarkly_data() -> Json {
    let rollout = |variations: Json| json!({"rollout": {"variations": variations}});
    json!({
        "flags": {
            // TestVariationIndexForUser: 60/40 under "hashKey"/"saltyA".
            "hashKey": {
                "key": "hashKey", "version": 3, "on": true, "salt": "saltyA",
                "variations": ["first", "second"], "offVariation": 0,
                "fallthrough": rollout(json!([{"variation": 0, "weight": 60000}, {"variation": 1, "weight": 40000}])),
                "targets": [{"values": ["vip"], "variation": 1}],
                "contextTargets": [{"contextKind": "user", "values": [], "variation": 1},
                                   {"contextKind": "org", "values": ["acme"], "variation": 0}],
                "rules": [{"id": "by-int", "clauses": [{"contextKind": "user", "attribute": "intAttr", "op": "greaterThan", "values": [0]}],
                           "rollout": {"contextKind": "user", "bucketBy": "intAttr",
                                       "variations": [{"variation": 0, "weight": 60000}, {"variation": 1, "weight": 40000}]}}],
                "clientSideAvailability": {"usingEnvironmentId": true, "usingMobileKey": false}
            },
            // TestVariationIndexForUserInExperiment: seed 61.
            "experiment": {
                "key": "experiment", "version": 1, "on": true, "salt": "ignored-with-a-seed",
                "variations": ["a", "b"], "offVariation": 0,
                "fallthrough": {"rollout": {"kind": "experiment", "seed": 61, "variations": [
                    {"variation": 0, "weight": 10000}, {"variation": 1, "weight": 20000},
                    {"variation": 0, "weight": 70000, "untracked": true}]}}
            },
            "gated": {
                "key": "gated", "version": 1, "on": true, "salt": "s",
                "variations": [true, false], "offVariation": 1,
                "prerequisites": [{"key": "hashKey", "variation": 1}],
                "rules": [{"id": "beta", "clauses": [{"attribute": "key", "op": "segmentMatch", "values": ["half"]}], "variation": 0}],
                "fallthrough": {"variation": 1}
            },
            "limit": {"key": "limit", "on": false, "salt": "n", "variations": [10, 100.0], "offVariation": 1,
                      "fallthrough": {"variation": 0}},
            "no-off": {"key": "no-off", "on": true, "variations": [true, false], "fallthrough": {"variation": 0}},
            // A pattern LaunchDarkly never matched; flagstream refuses it.
            "bad-regex": {"key": "bad-regex", "on": true, "variations": [true, false], "offVariation": 1,
                          "rules": [{"clauses": [{"attribute": "email", "op": "matches", "values": ["(unclosed"]}], "variation": 0}],
                          "fallthrough": {"variation": 1}},
            "odd-op": {"key": "odd-op", "on": true, "variations": [1, 2], "offVariation": 0,
                       "rules": [{"clauses": [{"attribute": "a", "op": "madeUp", "values": []}], "variation": 1}],
                       "fallthrough": {"variation": 0}}
        },
        "segments": {
            "half": {"key": "half", "version": 1, "salt": "segsalt", "included": ["vip"],
                     "rules": [{"id": "w", "clauses": [], "weight": 50000}]},
            "big": {"key": "big", "version": 1, "salt": "x", "unbounded": true}
        }
    })
}

#[tokio::test]
async fn launchdarkly_data_is_imported_exactly_or_reported() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let file = dir.path().join("ld.json");
    std::fs::write(&file, launchdarkly_data().to_string()).unwrap();
    let path = file.to_str().unwrap();

    let dry = relay.flagctl("demo", &["import", "launchdarkly", path, "--dry-run", "-o", "json"]);
    assert!(report(&dry).len() == 9, "{dry}");
    let lines = report(&relay.flagctl("demo", &["import", "launchdarkly", path, "--yes", "-o", "json"]));
    let result = |kind: &str, key: &str| outcome(&lines, kind, key);
    for (kind, key) in [
        ("flag", "hashKey"),
        ("flag", "experiment"),
        ("flag", "gated"),
        ("flag", "limit"),
        ("segment", "half"),
    ] {
        assert_eq!(result(kind, key).0, "exact", "{kind} {key}: {lines:?}");
    }
    let (skipped, why) = result("flag", "no-off");
    assert_eq!(skipped, "skipped");
    assert!(why.contains("offVariation"), "{why}");
    assert!(result("segment", "big").1.contains("big segment"), "{lines:?}");
    assert!(result("flag", "odd-op").1.contains("madeUp"), "{lines:?}");
    let (skipped, why) = result("flag", "bad-regex");
    assert!(skipped == "skipped" && why.contains("validation") && why.contains("invalid regex"), "{why}");

    let sdk = relay.sdk().build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    let snap = sdk.snapshot();
    let variation =
        |flag: &str, ctx: &Context<'_>| snap.detail(flag, ctx, std::borrow::Cow::Owned(Json::Null)).variation;
    // LaunchDarkly's expectations (go-server-sdk-evaluation,
    // evaluator_bucketing_test.go).
    assert_eq!(variation("hashKey", &Context::new("userKeyA")), Some(0));
    assert_eq!(variation("hashKey", &Context::new("userKeyB")), Some(1));
    assert_eq!(variation("hashKey", &Context::new("userKeyC")), Some(0));
    assert_eq!(variation("hashKey", &Context::new("userKeyD").with("intAttr", 33333)), Some(0));
    assert_eq!(variation("hashKey", &Context::new("userKeyD").with("intAttr", 99999)), Some(1));
    assert_eq!(variation("experiment", &Context::new("userKeyA")), Some(0));
    assert_eq!(variation("experiment", &Context::new("userKeyB")), Some(1));
    assert_eq!(variation("experiment", &Context::new("userKeyC")), Some(0));
    // Targets: the user list through contextTargets, an org key.
    assert_eq!(variation("hashKey", &Context::new("vip")), Some(1));
    assert_eq!(variation("hashKey", &Context::new("acme").kind("org")), Some(0));
    // A user-kind target never matches another kind with the same key.
    let org_vip =
        snap.detail("hashKey", &Context::new("vip").kind("org"), std::borrow::Cow::Owned(Json::Null));
    assert_ne!(org_vip.reason.kind_name(), "TARGET_MATCH", "{org_vip:?}");
    // The prerequisite and the segment: "vip" is in it and passes the
    // prerequisite (hashKey serves it 1).
    assert_eq!(variation("gated", &Context::new("vip")), Some(0));
    // The weighted rule, in LaunchDarkly's bucketing under "half.segsalt"
    // (each passes the prerequisite: hashKey serves them 1): u12 at
    // 0.2397 and u20 at 0.0336 are inside 50%, userKeyB at 0.7098 and u4
    // at 0.775 are not.
    for (user, inside) in [("u12", true), ("u20", true), ("userKeyB", false), ("u4", false)] {
        assert_eq!(variation("hashKey", &Context::new(user)), Some(1), "{user}");
        assert_eq!(variation("gated", &Context::new(user)), Some(if inside { 0 } else { 1 }), "{user}");
    }
    // An org context: hashKey's user-kind rollout puts a context without
    // that kind at 0 (variation 0, as LaunchDarkly does), so the
    // prerequisite fails.
    assert_eq!(variation("hashKey", &Context::new("u12").kind("org")), Some(0));
    assert_eq!(variation("gated", &Context::new("u12").kind("org")), Some(1));
    // A number flag, served as LaunchDarkly serves it.
    assert_eq!(snap.detail("limit", &Context::new("u"), 0i64).value, 100);
    // Visible to clients, as LaunchDarkly's client-side availability says.
    assert!(snap.flag("hashKey").unwrap().client_visible);
    assert!(!snap.flag("experiment").unwrap().client_visible);

    // The same file again: nothing to write.
    let again = relay.flagctl("demo", &["import", "launchdarkly", path, "--yes", "-o", "json"]);
    assert!(again.contains("up to date"), "{again}");
}
