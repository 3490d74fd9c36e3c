//! OFREP on a relay's own listener (`--ofrep-listen`), from a plain HTTP
//! client over a real socket: single-flag answers (value, reason, variant,
//! metadata), 404 `FLAG_NOT_FOUND`, the credential forms and 401s, 400
//! `PARSE_ERROR` and `INVALID_CONTEXT` naming the problem, the body cap,
//! the bulk answer with its ETag (304 for an unchanged result, a new ETag
//! after a write), and 429 with `Retry-After` in whole seconds, each
//! refusal counted.

use flagstream_tests::ofrep::post;
use flagstream_tests::relay::Relay;
use serde_json::json;

const SINGLE: &str = "/ofrep/v1/evaluate/flags/";
const BULK: &str = "/ofrep/v1/evaluate/flags";

#[tokio::test]
async fn single_and_bulk_answers_statuses_and_etags() {
    let dir = tempfile::tempdir().unwrap();
    let relay =
        Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0", "--ofrep-max-body-bytes", "1024"]).await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let key = relay.demo_key();
    let bearer = format!("Bearer {key}");
    let auth = [("Authorization", bearer.as_str())];
    let us =
        json!({"context": {"targetingKey": "user-42", "country": "US", "plan": "enterprise"}}).to_string();

    let r = post(addr, &format!("{SINGLE}new-checkout"), &auth, &us).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("content-type"), Some("application/json"));
    let b = r.json();
    assert_eq!(
        (b["key"].clone(), b["value"].clone(), b["reason"].clone(), b["variant"].clone()),
        (json!("new-checkout"), json!(true), json!("TARGETING_MATCH"), json!("0")),
        "{b}"
    );
    assert!(b["metadata"]["flagVersion"].is_u64(), "{b}");
    let theme = post(addr, &format!("{SINGLE}theme"), &[("X-API-Key", key.as_str())], &us).await.json();
    assert_eq!(
        (theme["value"].clone(), theme["reason"].clone()),
        (json!("dark"), json!("TARGETING_MATCH")),
        "X-API-Key"
    );
    let off =
        post(addr, &format!("{SINGLE}search-ranking"), &[("Authorization", key.as_str())], &us).await.json();
    assert_eq!(
        (off["value"].clone(), off["reason"].clone()),
        (json!({"model": "bm25"}), json!("DISABLED")),
        "a bare Authorization"
    );

    let r = post(addr, &format!("{SINGLE}no-such-flag"), &auth, &us).await;
    assert_eq!(
        (r.status, r.json()["errorCode"].clone(), r.json()["key"].clone()),
        (404, json!("FLAG_NOT_FOUND"), json!("no-such-flag"))
    );
    for (headers, what) in
        [(vec![], "no credential"), (vec![("Authorization", "Bearer not-a-key")], "an unknown key")]
    {
        let r = post(addr, &format!("{SINGLE}theme"), &headers, &us).await;
        assert_eq!(r.status, 401, "{what}: {r:?}");
    }
    let r = post(addr, &format!("{SINGLE}theme"), &auth, "{not json").await;
    assert_eq!(
        (r.status, r.json()["errorCode"].clone(), r.json()["key"].clone()),
        (400, json!("PARSE_ERROR"), json!("theme")),
        "{r:?}"
    );
    let r = post(addr, &format!("{SINGLE}theme"), &auth, r#"{"context": {"targetingKey": 7}}"#).await;
    assert_eq!((r.status, r.json()["errorCode"].clone()), (400, json!("INVALID_CONTEXT")), "{r:?}");
    assert!(r.json()["errorDetails"].as_str().unwrap().contains("context.targetingKey"), "{r:?}");
    let big = json!({"context": {"targetingKey": "u", "blob": "x".repeat(2000)}}).to_string();
    let r = post(addr, &format!("{SINGLE}theme"), &auth, &big).await;
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.json()["errorDetails"].as_str().unwrap().contains("ofrep-max-body-bytes"), "{r:?}");
    let r = post(addr, &format!("{SINGLE}theme"), &auth, "").await;
    assert_eq!(
        (r.status, r.json()["value"].clone()),
        (200, json!("system")),
        "no body: the empty key's answer"
    );

    // Bulk: every flag, an ETag, 304 while the results stand.
    let r = post(addr, BULK, &auth, &us).await;
    assert_eq!(r.status, 200, "{r:?}");
    let flags = r.json()["flags"].as_array().cloned().unwrap();
    let keys: Vec<&str> = flags.iter().map(|f| f["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["beta-banner", "max-upload-mb", "new-checkout", "search-ranking", "theme"]);
    let etag = r.header("etag").expect("an ETag").to_owned();
    let again = post(addr, BULK, &[auth[0], ("If-None-Match", etag.as_str())], &us).await;
    assert_eq!((again.status, again.body.as_str(), again.header("etag")), (304, "", Some(etag.as_str())));
    relay.flagctl("demo", &["flag", "off", "theme", "--yes"]);
    let changed = post(addr, BULK, &[auth[0], ("If-None-Match", etag.as_str())], &us).await;
    assert_eq!(changed.status, 200, "a result changed: {changed:?}");
    assert_ne!(changed.header("etag"), Some(etag.as_str()));

    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_unauthenticated\"}").await >= 2.0);
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_body\"}").await >= 1.0);
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_context\"}").await >= 1.0);
    assert!(relay.metric("flagstream_ofrep_requests_total{endpoint=\"bulk\",status=\"304\"}").await >= 1.0);
}

#[tokio::test]
async fn a_key_over_its_rate_gets_429_with_retry_after_in_seconds() {
    let dir = tempfile::tempdir().unwrap();
    let relay =
        Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0", "--ofrep-requests-per-sec-per-key", "1"])
            .await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let bearer = format!("Bearer {}", relay.demo_key());
    // One a second with a burst of two: 200 requests in a row cannot all
    // pass unless each took over a second.
    let mut refused = None;
    for _ in 0..200 {
        let r =
            post(addr, "/ofrep/v1/evaluate/flags/theme", &[("Authorization", bearer.as_str())], "{}").await;
        if r.status == 429 {
            refused = Some(r);
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
    }
    let r = refused.expect("a request over the key's rate is refused");
    let secs: u64 = r.header("retry-after").expect("Retry-After").parse().expect("whole seconds");
    assert!((1..=2).contains(&secs), "a wait of about one token at 1/s: {r:?}");
    assert!(r.json()["errorDetails"].as_str().unwrap().contains("ofrep-requests-per-sec-per-key"), "{r:?}");
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_rate_per_key\"}").await >= 1.0);
}
