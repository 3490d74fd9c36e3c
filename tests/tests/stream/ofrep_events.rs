//! OFREP's change stream over a real socket: the bulk answer advertises
//! it (`eventStreams`, a request URI with the stream token, never the key),
//! a stream starts with the head's id, a write arrives as a
//! `refetchEvaluation` event whose id is the environment's
//! `epoch:revision`, a client reconnecting with an older `Last-Event-ID`
//! gets one event at once (the change log's replay for a refetch), one at
//! the head gets nothing until the next write, and wrong tokens or
//! environments are refused 401.

use flagstream_tests::ofrep::{Events, post};
use flagstream_tests::relay::Relay;

/// `epoch:revision` split.
fn revision_of(id: &str) -> (String, u64) {
    let (epoch, rev) = id.split_once(':').expect("epoch:revision");
    (epoch.to_owned(), rev.parse().expect("a revision"))
}

#[tokio::test]
async fn a_write_arrives_as_a_refetch_event_and_a_reconnect_replays() {
    let dir = tempfile::tempdir().unwrap();
    let relay =
        Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0", "--ofrep-event-spread", "50ms"]).await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    let bearer = format!("Bearer {}", relay.demo_key());
    let bulk =
        post(addr, "/ofrep/v1/evaluate/flags", &[("Authorization", bearer.as_str())], "{}").await.json();
    let stream = &bulk["eventStreams"][0];
    assert_eq!(
        (stream["type"].as_str(), stream["inactivityDelaySec"].as_u64()),
        (Some("sse"), Some(120)),
        "{bulk}"
    );
    let uri = stream["endpoint"]["requestUri"].as_str().expect("a request URI").to_owned();
    assert!(uri.starts_with("/ofrep/v1/events?env=demo&token="), "{uri}");
    assert!(!uri.contains(&relay.demo_key()), "the SDK key itself is never in the URL");

    let mut lines = Events::open(addr, &uri, &[]).await;
    assert!(lines.status.contains(" 200 "), "{}", lines.status);
    // The stream starts with the head's id, after it subscribed to the
    // head: a write from now on reaches it.
    let (epoch, start) = revision_of(&lines.next_with("id: ").await);
    assert_eq!(relay.metric("flagstream_ofrep_event_streams").await, 1.0);
    relay.flagctl("demo", &["flag", "off", "theme", "--yes"]);
    let (id, data) = lines.next_event().await;
    assert_eq!(data["type"], "refetchEvaluation", "{data}");
    assert_eq!(data["etag"], id.as_str());
    let (same_epoch, revision) = revision_of(&id);
    assert_eq!(same_epoch, epoch);
    assert!(revision > start, "{id} after {start}");

    // A client back from a break, with an id behind the head: one event.
    let mut lines = Events::open(addr, &uri, &[("Last-Event-ID", format!("{epoch}:1").as_str())]).await;
    assert!(lines.status.contains(" 200 "), "{}", lines.status);
    assert_eq!(lines.next_with("id: ").await, id, "the stream's first id is the head's");
    let (replayed, _) = lines.next_event().await;
    assert_eq!(replayed, id, "the replay names the head");

    // A client at the head gets nothing until the next write, then it.
    let mut lines = Events::open(addr, &uri, &[("Last-Event-ID", id.as_str())]).await;
    assert_eq!(lines.next_with("id: ").await, id);
    relay.flagctl("demo", &["flag", "on", "theme", "--yes"]);
    let (next, _) = lines.next_event().await;
    assert!(revision_of(&next).1 > revision, "the first event is the new write's: {next} after {id}");

    for bad in [
        "/ofrep/v1/events?env=demo&token=00000000000000000000000000000000",
        "/ofrep/v1/events?env=%FF&token=00",
        "/ofrep/v1/events?env=nope&token=00",
    ] {
        let status = Events::open(addr, bad, &[]).await.status;
        assert!(status.contains(" 401 "), "{bad}: {status}");
    }
}
