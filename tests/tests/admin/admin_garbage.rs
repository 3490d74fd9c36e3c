//! Garbage is the client's error, not the relay's: a request body that is
//! not one well-formed message (truncated fields, wrong or invalid wire
//! types, over-long varints, invalid UTF-8, a length prefix past the end
//! of the body, a bad compression flag, no message at all), sent with a
//! valid admin token to every method of the Admin and Replication
//! services, is answered `INVALID_ARGUMENT` naming the decode failure,
//! counted per method in `flagstream_undecodable_requests_total`; never
//! `INTERNAL`, which PROTOCOL.md §6 keeps for the relay's own faults.
//! Another environment's stream keeps its heartbeats.

use bytes::Bytes;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::{Subscriber, Update};

/// Every rpc of `service` in `file` (the .proto is the list of methods).
fn methods(file: &str, service: &str) -> Vec<String> {
    let text =
        std::fs::read_to_string(format!("{}/../proto/flagstream/v1/{file}", env!("CARGO_MANIFEST_DIR")))
            .unwrap();
    let body = &text[text.find(&format!("service {service} {{")).expect("the service")..];
    let body = &body[..body.find("\n}").expect("its end")];
    body.lines().filter_map(|l| l.trim().strip_prefix("rpc ")?.split('(').next().map(str::to_owned)).collect()
}

/// One gRPC frame around `message`.
fn frame(flag: u8, message: &[u8]) -> Vec<u8> {
    let mut out = vec![flag];
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// `(what, request body, must be INVALID_ARGUMENT for every message type)`.
fn garbage() -> Vec<(&'static str, Vec<u8>, bool)> {
    vec![
        // Field 1, length-delimited, 5 bytes long, 1 byte there.
        ("truncated field", frame(0, &[0x0a, 0x05, b'a']), true),
        // Wire type 6 does not exist.
        ("invalid wire type", frame(0, &[0x0e, 0x01]), true),
        // Field 1 as a group (proto3 has none: prost refuses it for a known
        // field 1; a message without field 1 skips it as unknown).
        ("wrong wire type", frame(0, &[0x0b, 0x0c]), false),
        (
            "over-long varint",
            frame(0, &[0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            true,
        ),
        ("truncated varint", frame(0, &[0x08, 0xff]), true),
        // Field 1 as a string of invalid UTF-8 (field 1 is a string in most
        // requests; where it is not, the message may decode: then any
        // answer but INTERNAL).
        ("invalid UTF-8", frame(0, &[0x0a, 0x02, 0xc3, 0x28]), false),
        // The prefix says 100 bytes; the body ends after 3.
        (
            "length prefix past the body",
            {
                let mut f = frame(0, &[0x0a, 0x01, b'a']);
                f[1..5].copy_from_slice(&100u32.to_be_bytes());
                f
            },
            true,
        ),
        ("compressed flag without an encoding", frame(1, &[0x0a, 0x01, b'a']), true),
        ("invalid compression flag", frame(7, &[0x0a, 0x01, b'a']), true),
        ("no message", Vec::new(), true),
    ]
}

/// Sends `body` to `path` over HTTP/2 with the admin token; the answer's
/// `(grpc-status, grpc-message)`.
async fn call(relay: &Relay, path: &str, body: Vec<u8>) -> (u32, String) {
    let tcp = tokio::net::TcpStream::connect(relay.admin).await.unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.unwrap();
    let conn = tokio::spawn(conn);
    let mut send = send.ready().await.unwrap();
    let req = http::Request::post(format!("http://{}{path}", relay.admin))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("authorization", format!("Bearer {}", relay.admin_token()))
        .body(())
        .unwrap();
    let (response, mut stream) = send.send_request(req, false).unwrap();
    stream.send_data(Bytes::from(body), true).unwrap();
    let response = tokio::time::timeout(STEP, response).await.expect("an answer").unwrap();
    let (parts, mut answer) = response.into_parts();
    let status = match parts.headers.get("grpc-status") {
        Some(_) => parts.headers,
        None => {
            while let Some(chunk) = answer.data().await {
                chunk.unwrap();
            }
            answer.trailers().await.unwrap().expect("grpc trailers")
        }
    };
    conn.abort();
    let status = tonic::Status::from_header_map(&status).expect("a grpc-status");
    (status.code() as u32, status.message().to_owned())
}

#[tokio::test]
async fn garbage_is_invalid_argument_on_every_method() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--heartbeat", "200ms"]).await;
    let other_key = relay.create_env("other").await;
    let mut other = Subscriber::connect(relay.channel().await, &other_key, None).await.unwrap();
    other.next_change(STEP).await.unwrap();

    let mut services: Vec<(&str, String)> =
        methods("admin.proto", "Admin").into_iter().map(|m| ("flagstream.v1.Admin", m)).collect();
    services.extend(
        methods("replication.proto", "Replication").into_iter().map(|m| ("flagstream.v1.Replication", m)),
    );
    assert!(services.len() > 25, "{services:?}");
    let mut failures = Vec::new();
    for (service, method) in &services {
        let path = format!("/{service}/{method}");
        for (what, body, always) in garbage() {
            let (code, message) = call(&relay, &path, body).await;
            // 3 = INVALID_ARGUMENT, 13 = INTERNAL.
            if code == 13 || (always && code != 3) {
                failures.push(format!("{path} with {what}: {code} {message}"));
            } else if code == 3 && always && !message.contains("undecodable request message") {
                failures.push(format!("{path} with {what}: the message names no decode failure: {message}"));
            }
        }
        let counted = relay
            .metric(&format!(
                "flagstream_undecodable_requests_total{{service=\"{service}\",method=\"{method}\"}}"
            ))
            .await;
        let always = garbage().iter().filter(|g| g.2).count() as f64;
        if counted < always {
            failures.push(format!("{path}: {counted} undecodable requests counted, want at least {always}"));
        }
    }
    assert!(failures.is_empty(), "{} wrong answers:\n{}", failures.len(), failures.join("\n"));
    let text = relay.metrics_text().await;
    let internal: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("flagstream_grpc_refusals_total{") && l.contains("code=\"INTERNAL\""))
        .collect();
    assert!(internal.is_empty(), "INTERNAL answered: {internal:?}");
    for _ in 0..3 {
        assert!(matches!(other.next(STEP).await.unwrap(), Update::Heartbeat { .. }), "heartbeats go on");
    }
}
