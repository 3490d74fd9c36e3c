//! OFREP's limits and refusals beyond the answers' (`ofrep_answers.rs`):
//! a credential over 256 bytes refused unhashed, a wrong method `405`, a
//! path that is no endpoint `404`, and the change-stream cap: past
//! `ofrep-max-event-streams` a stream is answered `429` with `Retry-After`
//! and counted; each refusal counted in `limit_hits` or by status.

use flagstream_tests::ofrep::{Events, post, request};
use flagstream_tests::relay::Relay;

const BULK: &str = "/ofrep/v1/evaluate/flags";

#[tokio::test]
async fn credentials_methods_paths_and_the_stream_cap() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        dir.path(),
        &["--ofrep-listen", "127.0.0.1:0", "--ofrep-max-connections", "16", "--ofrep-max-event-streams", "1"],
    )
    .await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let bearer = format!("Bearer {}", relay.demo_key());
    let auth = [("Authorization", bearer.as_str())];

    let before = relay.metric("flagstream_limit_hits_total{limit=\"ofrep_unauthenticated\"}").await;
    let long = format!("Bearer fs_sdk_{}", "x".repeat(300));
    let r = post(addr, BULK, &[("Authorization", long.as_str())], "{}").await;
    assert_eq!((r.status, r.json()["errorCode"].as_str()), (401, Some("GENERAL")), "{r:?}");
    assert_eq!(
        relay.metric("flagstream_limit_hits_total{limit=\"ofrep_unauthenticated\"}").await,
        before + 1.0
    );

    let r = request(addr, "GET", BULK, &auth, "").await;
    assert_eq!(r.status, 405, "{r:?}");
    assert!(r.json()["errorDetails"].as_str().unwrap_or("").contains("POST"), "{r:?}");
    let r = post(addr, "/ofrep/v2/evaluate/flags", &auth, "{}").await;
    assert_eq!(r.status, 404, "{r:?}");
    assert_eq!(relay.metric("flagstream_ofrep_requests_total{endpoint=\"other\",status=\"404\"}").await, 1.0);

    // One change stream is the cap: the next is refused with a hint.
    let uri = post(addr, BULK, &auth, "{}").await.json()["eventStreams"][0]["endpoint"]["requestUri"]
        .as_str()
        .expect("a change stream")
        .to_owned();
    let mut first = Events::open(addr, &uri, &[]).await;
    assert!(first.status.contains(" 200 "), "{}", first.status);
    first.next_with("id: ").await;
    let second = Events::open(addr, &uri, &[]).await;
    assert!(second.status.contains(" 429 "), "{}", second.status);
    assert!(second.headers.iter().any(|h| h.eq_ignore_ascii_case("retry-after: 5")), "{:?}", second.headers);
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_event_streams\"}").await, 1.0);
    assert_eq!(relay.metric("flagstream_ofrep_event_streams").await, 1.0);
    // Evaluations still have their connections.
    assert_eq!(post(addr, BULK, &auth, "{}").await.status, 200);
}
