//! OFREP's change stream over a real socket: the bulk answer advertises
//! it (`eventStreams`, a request URI with the stream token, never the key),
//! a stream starts with the head's id, a write arrives as a
//! `refetchEvaluation` event whose id is the environment's
//! `epoch:revision`, a client reconnecting with an older `Last-Event-ID`
//! gets one event at once (the change log's replay for a refetch), one at
//! the head gets nothing until the next write, and wrong tokens or
//! environments are refused 401.

use flagstream_tests::STEP;
use flagstream_tests::ofrep::post;
use flagstream_tests::relay::Relay;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

type Lines = tokio::io::Lines<BufReader<tokio::net::TcpStream>>;

/// Opens the change stream at `uri`; returns its status line and the reader.
async fn open(addr: std::net::SocketAddr, uri: &str, last_event_id: Option<&str>) -> (String, Lines) {
    tokio::time::timeout(STEP, async {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("the OFREP listener accepts");
        let last = match last_event_id {
            Some(id) => format!("Last-Event-ID: {id}\r\n"),
            None => String::new(),
        };
        let req = format!("GET {uri} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{last}\r\n");
        s.write_all(req.as_bytes()).await.expect("the request is sent");
        let mut lines = BufReader::new(s).lines();
        let status = lines.next_line().await.expect("a reply").expect("a status line");
        (status, lines)
    })
    .await
    .expect("the relay answers in time")
}

/// The next line starting with `prefix`, without it.
async fn next_with(lines: &mut Lines, prefix: &str) -> String {
    while let Some(line) =
        tokio::time::timeout(STEP, lines.next_line()).await.expect("in time").expect("readable")
    {
        if let Some(rest) = line.strip_prefix(prefix) {
            return rest.to_owned();
        }
    }
    panic!("the stream ended before a line starting {prefix:?}");
}

/// The next event's id and data (skipping comments and chunk framing).
async fn next_event(lines: &mut Lines) -> (String, serde_json::Value) {
    let id = next_with(lines, "id: ").await;
    let data = next_with(lines, "data: ").await;
    (id, serde_json::from_str(&data).expect("JSON data"))
}

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

    let (status, mut lines) = open(addr, &uri, None).await;
    assert!(status.contains(" 200 "), "{status}");
    // The stream starts with the head's id, after it subscribed to the
    // head: a write from now on reaches it.
    let (epoch, start) = revision_of(&next_with(&mut lines, "id: ").await);
    assert_eq!(relay.metric("flagstream_ofrep_event_streams").await, 1.0);
    relay.flagctl("demo", &["flag", "off", "theme", "--yes"]);
    let (id, data) = next_event(&mut lines).await;
    assert_eq!(data["type"], "refetchEvaluation", "{data}");
    assert_eq!(data["etag"], id.as_str());
    let (same_epoch, revision) = revision_of(&id);
    assert_eq!(same_epoch, epoch);
    assert!(revision > start, "{id} after {start}");

    // A client back from a break, with an id behind the head: one event.
    let (status, mut lines) = open(addr, &uri, Some(&format!("{epoch}:1"))).await;
    assert!(status.contains(" 200 "), "{status}");
    assert_eq!(next_with(&mut lines, "id: ").await, id, "the stream's first id is the head's");
    let (replayed, _) = next_event(&mut lines).await;
    assert_eq!(replayed, id, "the replay names the head");

    // A client at the head gets nothing until the next write, then it.
    let (_, mut lines) = open(addr, &uri, Some(&id)).await;
    assert_eq!(next_with(&mut lines, "id: ").await, id);
    relay.flagctl("demo", &["flag", "on", "theme", "--yes"]);
    let (next, _) = next_event(&mut lines).await;
    assert!(revision_of(&next).1 > revision, "the first event is the new write's: {next} after {id}");

    for bad in [
        "/ofrep/v1/events?env=demo&token=00000000000000000000000000000000",
        "/ofrep/v1/events?env=%FF&token=00",
        "/ofrep/v1/events?env=nope&token=00",
    ] {
        let (status, _) = open(addr, bad, None).await;
        assert!(status.contains(" 401 "), "{bad}: {status}");
    }
}
