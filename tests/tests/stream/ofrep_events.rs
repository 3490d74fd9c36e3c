//! OFREP's change stream over a real socket: the bulk answer advertises
//! it (`eventStreams`, a request URI with the stream token), a write
//! arrives as a `refetchEvaluation` event whose id is the environment's
//! `epoch:revision`, a client reconnecting with an older `Last-Event-ID`
//! gets one event at once (the change log's replay for a refetch), and a
//! wrong token is refused 401.

use flagstream_tests::STEP;
use flagstream_tests::ofrep::post;
use flagstream_tests::relay::Relay;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Opens the change stream at `uri`; returns its status line and the reader.
async fn open(
    addr: std::net::SocketAddr,
    uri: &str,
    last_event_id: Option<&str>,
) -> (String, tokio::io::Lines<BufReader<tokio::net::TcpStream>>) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("the OFREP listener accepts");
    let last = last_event_id.map(|id| format!("Last-Event-ID: {id}\r\n")).unwrap_or_default();
    s.write_all(
        format!("GET {uri} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n{last}\r\n").as_bytes(),
    )
    .await
    .expect("the request is sent");
    let mut lines = BufReader::new(s).lines();
    let status = lines.next_line().await.expect("a reply").expect("a status line");
    (status, lines)
}

/// The next event's id and data (skipping comments and chunk framing).
async fn next_event(lines: &mut tokio::io::Lines<BufReader<tokio::net::TcpStream>>) -> (String, String) {
    let (mut id, mut data) = (None, None);
    while let Some(line) =
        tokio::time::timeout(STEP, lines.next_line()).await.expect("an event in time").expect("readable")
    {
        if let Some(v) = line.strip_prefix("id: ") {
            id = Some(v.to_owned());
        } else if let Some(v) = line.strip_prefix("data: ") {
            data = Some(v.to_owned());
        }
        if let (Some(i), Some(d)) = (&id, &data) {
            return (i.clone(), d.clone());
        }
    }
    panic!("the stream ended without an event");
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
    // The stream's first comment comes after it subscribed to the head:
    // a write from now on reaches it.
    while let Some(line) =
        tokio::time::timeout(STEP, lines.next_line()).await.expect("in time").expect("readable")
    {
        if line == ": flagstream" {
            break;
        }
    }
    assert_eq!(relay.metric("flagstream_ofrep_event_streams").await, 1.0);
    relay.flagctl("demo", &["flag", "off", "theme", "--yes"]);
    let (id, data) = next_event(&mut lines).await;
    let data: serde_json::Value = serde_json::from_str(&data).expect("JSON data");
    assert_eq!(data["type"], "refetchEvaluation", "{data}");
    let (epoch, revision) = id.split_once(':').expect("epoch:revision");
    let revision: u64 = revision.parse().expect("a revision");
    assert!(!epoch.is_empty() && revision >= 2, "{id}");
    assert_eq!(data["etag"], id.as_str());

    // A client back from a break, with an id behind the head: one event.
    let (status, mut lines) = open(addr, &uri, Some(&format!("{epoch}:1"))).await;
    assert!(status.contains(" 200 "), "{status}");
    let (replayed, _) = next_event(&mut lines).await;
    assert_eq!(replayed, id, "the replay names the head");

    let (status, _) =
        open(addr, "/ofrep/v1/events?env=demo&token=00000000000000000000000000000000", None).await;
    assert!(status.contains(" 401 "), "{status}");
}
