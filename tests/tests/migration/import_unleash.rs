//! `flagctl import unleash` into a real relay: each Unleash feature becomes
//! `<name>` (its `isEnabled`) and `<name>.variant` (its `getVariant`), and
//! the Rust SDK gives the answers Unleash's own normalisation tests imply
//! (`"gr1:123"` at 73 for a strategy, 96 for variants weighing 100 in all;
//! `"groupX:999"` at 60 for variants); dependencies, segments with
//! Unleash's `NOT_IN` on a missing field, numbers; a custom strategy and a
//! random percentage are reported, not imported, unless `--approximate` is
//! asked for; the same file again is a no-op, a changed one shows the
//! difference.

use std::borrow::Cow;

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use serde_json::{Value as Json, json};

use crate::{outcome, report};

fn strategy(name: &str, parameters: Json) -> Json {
    json!({"name": name, "parameters": parameters, "constraints": [], "segments": []})
}

fn feature(name: &str, strategies: Json) -> Json {
    json!({"name": name, "enabled": true, "strategies": strategies})
}

fn unleash_data() -> Json {
    let variants = |stickiness: &str| {
        json!([
            {"name": "a", "weight": 50, "stickiness": stickiness, "payload": {"type": "string", "value": "A"},
             "overrides": [{"contextName": "userId", "values": ["override-me"]}]},
            {"name": "b", "weight": 45, "stickiness": stickiness, "payload": {"type": "string", "value": "B"}},
            {"name": "c", "weight": 5, "stickiness": stickiness, "payload": {"type": "string", "value": "C"}}
        ])
    };
    let mut gr1 = feature("gr1", json!([strategy("default", json!({}))]));
    gr1["variants"] = variants("default");
    let mut group_x = feature("groupX", json!([strategy("default", json!({}))]));
    group_x["variants"] = variants("userId");
    let mut switched_off = feature("switched-off", json!([strategy("default", json!({}))]));
    switched_off["enabled"] = json!(false);
    switched_off["variants"] = variants("default");
    let mut child = feature("child", json!([strategy("default", json!({}))]));
    child["dependencies"] = json!([{"feature": "gr1", "variants": ["c"]}]);
    let mut segmented = feature("segmented", json!([strategy("default", json!({}))]));
    segmented["strategies"][0]["segments"] = json!([1]);
    let mut numbers = feature("numbers", json!([strategy("default", json!({}))]));
    numbers["strategies"][0]["constraints"] =
        json!([{"contextName": "age", "operator": "NUM_GT", "value": "18", "inverted": false}]);
    json!({
        "version": 2,
        "features": [
            feature("rollout-73", json!([strategy("flexibleRollout", json!({"rollout": "73", "stickiness": "default", "groupId": "gr1"}))])),
            feature("rollout-72", json!([strategy("flexibleRollout", json!({"rollout": "72", "stickiness": "default", "groupId": "gr1"}))])),
            gr1, group_x, switched_off, child, segmented, numbers,
            feature("custom", json!([strategy("myStrategy", json!({"x": "1"}))])),
            feature("random", json!([strategy("gradualRolloutRandom", json!({"percentage": "30"}))])),
        ],
        "segments": [{"id": 1, "name": "not-prod",
                      "constraints": [{"contextName": "environment", "operator": "NOT_IN", "values": ["prod"]}]}]
    })
}

#[tokio::test]
async fn unleash_features_are_imported_exactly_or_reported() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let file = dir.path().join("unleash.json");
    std::fs::write(&file, unleash_data().to_string()).unwrap();
    let path = file.to_str().unwrap();

    let lines = report(&relay.flagctl("demo", &["import", "unleash", path, "--yes", "-o", "json"]));
    let result = |kind: &str, key: &str| outcome(&lines, kind, key);
    for key in ["rollout-73", "rollout-72", "gr1", "groupX", "switched-off", "child", "segmented", "numbers"]
    {
        assert_eq!(result("feature", key).0, "exact", "{key}: {lines:?}");
    }
    assert_eq!(result("segment", "unleash-segment-1").0, "exact");
    let (custom, why) = result("feature", "custom");
    assert!(custom == "skipped" && why.contains("myStrategy"), "{why}");
    let (random, why) = result("feature", "random");
    assert!(random == "skipped" && why.contains("--approximate"), "{why}");
    let (note, what) = result("attribute", "age");
    assert!(note == "note" && what.contains("number"), "{what}");

    let sdk = relay.sdk().build().unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    let snap = sdk.snapshot();
    let enabled = |flag: &str, ctx: &Context<'_>| snap.detail(flag, ctx, false).value;
    let variant = |flag: &str, ctx: &Context<'_>| {
        let v = snap.detail(&format!("{flag}.variant"), ctx, Cow::Owned(Json::Null)).value.into_owned();
        v["name"].as_str().unwrap_or("").to_owned()
    };
    let user = |id: &str| Context::new(id.to_owned()).with("userId", id.to_owned());
    // normalized("gr1", "123") = 73: inside 73%, outside 72%; by sessionId
    // without a userId; never without either (Unleash: at random).
    assert!(enabled("rollout-73", &user("123")));
    assert!(!enabled("rollout-72", &user("123")));
    let session = Context::new("").with("sessionId", "123");
    assert!(enabled("rollout-73", &session));
    assert!(!enabled("rollout-72", &session));
    assert!(!enabled("rollout-73", &Context::new("")));
    // Variants: "123" at 96 of 100 in "gr1" (a 50, b 45, c 5) is c;
    // "999" at 60 in "groupX" is b; an override wins.
    assert_eq!(variant("gr1", &user("123")), "c");
    assert_eq!(variant("groupX", &user("999")), "b");
    assert_eq!(variant("gr1", &user("override-me")), "a");
    let full = snap.detail("gr1.variant", &user("123"), Cow::Owned(Json::Null)).value.into_owned();
    assert_eq!(
        full,
        json!({"name": "c", "enabled": true, "feature_enabled": true, "payload": {"type": "string", "value": "C"}})
    );
    // Named stickiness without its field: the first variant with a weight.
    assert_eq!(variant("groupX", &Context::new("k")), "a");
    // The dependency on gr1's variant c.
    assert!(enabled("child", &user("123")));
    assert!(!enabled("child", &user("override-me")));
    // NOT_IN on a missing field is true in Unleash.
    assert!(enabled("segmented", &Context::new("k")));
    assert!(enabled("segmented", &Context::new("k").with("environment", "dev")));
    assert!(!enabled("segmented", &Context::new("k").with("environment", "prod")));
    assert!(enabled("numbers", &Context::new("k").with("age", 30)));
    assert!(!enabled("numbers", &Context::new("k").with("age", 18)));
    // A disabled feature: not enabled, and Unleash's "disabled" variant.
    assert!(!enabled("switched-off", &user("123")));
    let off = snap.detail("switched-off.variant", &user("123"), Cow::Owned(Json::Null)).value.into_owned();
    assert_eq!(off, json!({"name": "disabled", "enabled": false, "feature_enabled": false}));

    // The same file again: nothing to write.
    let again = relay.flagctl("demo", &["import", "unleash", path, "--yes", "-o", "json"]);
    assert!(again.contains("up to date"), "{again}");
    // A changed file shows the difference: the strategy's segment, its
    // weight.
    let mut changed = unleash_data();
    changed["features"][0]["strategies"][0]["parameters"]["rollout"] = json!("50");
    std::fs::write(&file, changed.to_string()).unwrap();
    let (_, plan) = relay.flagctl_with_stderr("demo", &["import", "unleash", path, "--dry-run"]);
    assert!(plan.contains("~ segment \"rollout-73.strategy1\""), "{plan}");
    assert!(plan.contains("73000") && plan.contains("50000"), "{plan}");
    std::fs::write(&file, unleash_data().to_string()).unwrap();
    // Asked for, the random percentage comes as a steady share of keys,
    // said so.
    let approx = report(
        &relay.flagctl("demo", &["import", "unleash", path, "--approximate", "--dry-run", "-o", "json"]),
    );
    let line = approx.iter().find(|l| l["key"] == "random").unwrap();
    assert_eq!(line["result"], "approximate", "{line}");
    assert!(line["reason"].as_str().unwrap().contains("steady 30%"), "{line}");
}
