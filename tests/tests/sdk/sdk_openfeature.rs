//! The OpenFeature provider resolves every type through the flagstream
//! engine with reasons and error codes mapped exactly.

use flagstream::openfeature::FlagstreamProvider;
use flagstream::{Client, FlagSet};
use open_feature::provider::{FeatureProvider, ProviderStatus};
use open_feature::{EvaluationContext, EvaluationErrorCode, EvaluationReason};

const FLAGS: &str = r#"
flags:
  - key: checkout
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    rules:
      - {id: us, clauses: [{attribute: country, op: in, values: [US]}], serve: {variation: 0}}
    fallthrough: {rollout: {variations: [{variation: 0, weight: 50000}, {variation: 1, weight: 50000}]}}
  - {key: killed, type: bool, variations: [true, false], on: false, off_variation: 1, fallthrough: {variation: 0}}
  - {key: theme, type: string, variations: [light, dark], on: true, off_variation: 0, targets: [{variation: 1, values: [ann]}], fallthrough: {variation: 0}}
  - {key: limit, type: int, variations: [10, 100], on: true, off_variation: 0, fallthrough: {variation: 1}}
  - {key: ratio, type: float, variations: [0.25], on: true, off_variation: 0, fallthrough: {variation: 0}}
  - key: org-beta
    type: bool
    variations: [true, false]
    on: true
    off_variation: 1
    targets: [{context_kind: device, variation: 0, values: [d1]}]
    rules:
      - {id: berlin, clauses: [{context_kind: org, attribute: /address/city, op: in, values: [Berlin]}], serve: {variation: 0}}
    fallthrough: {variation: 1}
  - {key: config, type: json, variations: [{"model": "bm25", "k": 3}, [1, 2]], on: true, off_variation: 1, fallthrough: {variation: 0}}
"#;

fn provider() -> FlagstreamProvider {
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
    FlagstreamProvider::new(Client::builder().test_data(set).build().unwrap())
}

/// Values, variants and reasons for every type.
#[tokio::test]
async fn resolves_every_type_with_reasons() {
    let p = provider();
    assert_eq!(p.status(), ProviderStatus::Ready);
    let us = EvaluationContext::default().with_targeting_key("u1").with_custom_field("country", "US");
    let r = p.resolve_bool_value("checkout", &us).await.unwrap();
    assert_eq!(
        (r.value, r.variant.as_deref(), r.reason),
        (true, Some("0"), Some(EvaluationReason::TargetingMatch))
    );
    let fr = EvaluationContext::default().with_targeting_key("u1").with_custom_field("country", "FR");
    let r = p.resolve_bool_value("checkout", &fr).await.unwrap();
    assert_eq!(r.reason, Some(EvaluationReason::Split));
    let r = p.resolve_bool_value("killed", &fr).await.unwrap();
    assert_eq!((r.value, r.reason), (false, Some(EvaluationReason::Disabled)));
    let ann = EvaluationContext::default().with_targeting_key("ann");
    let r = p.resolve_string_value("theme", &ann).await.unwrap();
    assert_eq!((r.value.as_str(), r.reason), ("dark", Some(EvaluationReason::TargetingMatch)));
    let r = p.resolve_int_value("limit", &ann).await.unwrap();
    assert_eq!((r.value, r.reason), (100, Some(EvaluationReason::Default)));
    assert_eq!(p.resolve_float_value("ratio", &ann).await.unwrap().value, 0.25);
    assert_eq!(p.resolve_float_value("limit", &ann).await.unwrap().value, 100.0, "int flags read as float");
    let s = p.resolve_struct_value("config", &ann).await.unwrap().value;
    assert_eq!(s.fields.get("model").and_then(|v| v.as_str()), Some("bm25"));
}

/// Error codes: not found, type mismatch.
#[tokio::test]
async fn error_codes_map_exactly() {
    let p = provider();
    let ctx = EvaluationContext::default().with_targeting_key("u");
    let e = p.resolve_bool_value("nope", &ctx).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::FlagNotFound);
    let e = p.resolve_string_value("checkout", &ctx).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::TypeMismatch);
    let e = p.resolve_int_value("ratio", &ctx).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::TypeMismatch);
}

/// A client without data is NOT_READY and says PROVIDER_NOT_READY.
#[tokio::test]
async fn not_ready() {
    let c = Client::builder().endpoints(["http://127.0.0.1:9"]).sdk_key("k").build().unwrap();
    let p = FlagstreamProvider::new(c);
    assert_eq!(p.status(), ProviderStatus::NotReady);
    let e = p.resolve_bool_value("x", &EvaluationContext::default()).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::ProviderNotReady);
}

/// A multi-kind OpenFeature context (`kind: "multi"`, one structure per
/// kind) reaches per-kind targets and clauses, and a structure attribute
/// is addressed by a reference.
#[tokio::test]
async fn multi_kind_contexts_and_structures_map() {
    use open_feature::{EvaluationContextFieldValue as F, StructValue, Value};
    let p = provider();
    let org =
        |city: &str| F::new_struct(serde_json::json!({"targetingKey": "acme", "address": {"city": city}}));
    let device = |key: &str| {
        F::new_struct(StructValue::default().with_field("targetingKey", Value::String(key.into())))
    };
    let ctx = |city: &str, dev: &str| {
        EvaluationContext::default()
            .with_custom_field("kind", "multi")
            .with_custom_field("org", org(city))
            .with_custom_field("device", device(dev))
    };
    let r = p.resolve_bool_value("org-beta", &ctx("Berlin", "d9")).await.unwrap();
    assert_eq!((r.value, r.reason), (true, Some(EvaluationReason::TargetingMatch)), "org rule");
    let r = p.resolve_bool_value("org-beta", &ctx("Paris", "d1")).await.unwrap();
    assert_eq!((r.value, r.reason), (true, Some(EvaluationReason::TargetingMatch)), "device target");
    let r = p.resolve_bool_value("org-beta", &ctx("Paris", "d9")).await.unwrap();
    assert_eq!((r.value, r.reason), (false, Some(EvaluationReason::Default)));
    // Single kind: the structure is an attribute the reference reads.
    let single = EvaluationContext::default()
        .with_targeting_key("acme")
        .with_custom_field("kind", "org")
        .with_custom_field("address", F::new_struct(serde_json::json!({"city": "Berlin"})));
    let r = p.resolve_bool_value("org-beta", &single).await.unwrap();
    assert!(r.value, "the single-kind org context with a structure attribute matches");
}

/// The context limits hold for OpenFeature contexts too: over 64 kinds or
/// 256 attributes in a kind, the evaluation is INVALID_CONTEXT naming the
/// limit; at the limits it evaluates.
#[tokio::test]
async fn contexts_over_the_limits_are_invalid() {
    use open_feature::EvaluationContextFieldValue as F;
    let p = provider();
    let attrs = |n: usize| {
        (0..n).fold(EvaluationContext::default().with_targeting_key("u1"), |c, i| {
            c.with_custom_field(format!("a{i}"), i as i64)
        })
    };
    p.resolve_bool_value("checkout", &attrs(256)).await.unwrap();
    let e = p.resolve_bool_value("checkout", &attrs(257)).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::InvalidContext);
    assert_eq!(
        e.message.as_deref(),
        Some("context: 257 attributes, the limit is 256 (max-context-attributes)")
    );
    let kinds = |n: usize| {
        (0..n).fold(EvaluationContext::default().with_custom_field("kind", "multi"), |c, i| {
            c.with_custom_field(format!("k{i}"), F::new_struct(serde_json::json!({"targetingKey": "x"})))
        })
    };
    p.resolve_bool_value("checkout", &kinds(64)).await.unwrap();
    let e = p.resolve_bool_value("checkout", &kinds(65)).await.unwrap_err();
    assert_eq!(e.code, EvaluationErrorCode::InvalidContext);
    assert_eq!(e.message.as_deref(), Some("context: 65 kinds, the limit is 64 (max-context-kinds)"));
    let many: serde_json::Map<String, serde_json::Value> = (0..300)
        .map(|i| (format!("a{i}"), serde_json::json!(i)))
        .chain([("key".into(), "acme".into())])
        .collect();
    let org = EvaluationContext::default()
        .with_custom_field("kind", "multi")
        .with_custom_field("org", F::new_struct(serde_json::Value::Object(many)));
    let e = p.resolve_bool_value("checkout", &org).await.unwrap_err();
    assert_eq!(
        e.message.as_deref(),
        Some("context.org: 300 attributes, the limit is 256 (max-context-attributes)")
    );
}

/// Evaluations observed through the provider's own hook, under the
/// OpenTelemetry attribute names; without an observer the provider has no
/// hook and adds no metadata; a panicking observer changes no result.
#[tokio::test]
async fn evaluations_are_observed_with_opentelemetry_attribute_names() {
    use std::sync::{Arc, Mutex};

    use flagstream::openfeature::{ERROR_TYPE, KEY, PROVIDER, REASON, VARIANT, VERSION};
    use open_feature::OpenFeature;

    let plain = provider();
    assert!(plain.hooks().is_empty(), "no observer, no hook");
    let us = EvaluationContext::default().with_targeting_key("u1").with_custom_field("country", "US");
    assert_eq!(plain.resolve_bool_value("checkout", &us).await.unwrap().flag_metadata, None, "nothing added");

    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
    let client = Client::builder().test_data(set).build().unwrap();
    let version = format!("{}:{}", client.snapshot().epoch(), client.snapshot().revision());
    type Attributes = Vec<(&'static str, String)>;
    let seen: Arc<Mutex<Vec<Attributes>>> = Arc::default();
    let sink = seen.clone();
    let observed = FlagstreamProvider::new(client)
        .on_evaluation(move |a: &[(&'static str, String)]| sink.lock().unwrap().push(a.to_vec()));
    assert_eq!(observed.hooks().len(), 1);
    OpenFeature::singleton_mut().await.set_named_provider("observed", observed).await;
    let of = OpenFeature::singleton().await.create_named_client("observed");

    let fr = EvaluationContext::default().with_targeting_key("u1").with_custom_field("country", "FR");
    assert!(of.get_bool_value("checkout", Some(&us), None).await.unwrap());
    let split = of.get_bool_details("checkout", Some(&fr), None).await.unwrap();
    assert!(of.get_bool_value("no-such-flag", Some(&us), None).await.is_err());
    assert!(of.get_bool_value("theme", Some(&us), None).await.is_err(), "a string flag read as bool");

    let attrs =
        |pairs: &[(&'static str, &str)]| pairs.iter().map(|(k, v)| (*k, v.to_string())).collect::<Vec<_>>();
    let split_variant = split.variant.clone().expect("a rollout serves a variation");
    assert_eq!(
        *seen.lock().unwrap(),
        vec![
            attrs(&[
                (KEY, "checkout"),
                (PROVIDER, "flagstream"),
                (VARIANT, "0"),
                (REASON, "targeting_match"),
                (VERSION, &version)
            ]),
            attrs(&[
                (KEY, "checkout"),
                (PROVIDER, "flagstream"),
                (VARIANT, &split_variant),
                (REASON, "split"),
                (VERSION, &version)
            ]),
            attrs(&[
                (KEY, "no-such-flag"),
                (PROVIDER, "flagstream"),
                (REASON, "error"),
                (ERROR_TYPE, "flag_not_found"),
                (VERSION, &version)
            ]),
            attrs(&[
                (KEY, "theme"),
                (PROVIDER, "flagstream"),
                (REASON, "error"),
                (ERROR_TYPE, "type_mismatch"),
                (VERSION, &version)
            ]),
        ]
    );

    // A panicking observer: the evaluation's result is unchanged.
    let set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
    let loud = FlagstreamProvider::new(Client::builder().test_data(set).build().unwrap())
        .on_evaluation(|_: &[(&'static str, String)]| panic!("an observer that fails"));
    OpenFeature::singleton_mut().await.set_named_provider("loud", loud).await;
    let of = OpenFeature::singleton().await.create_named_client("loud");
    assert!(of.get_bool_value("checkout", Some(&us), None).await.unwrap());
    assert!(!of.get_bool_value("killed", Some(&us), None).await.unwrap());
}
