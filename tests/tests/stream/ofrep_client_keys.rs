//! Client-side keys (browsers, apps) over a real relay: made with
//! `flagctl key create --client`, they call OFREP only (Subscribe refuses
//! them), see only flags marked visible to clients, and learn nothing of
//! the others: a hidden flag answers exactly as a missing one, is absent
//! from the bulk answer, a write to it leaves the client's ETag alone and
//! sends its change stream no event. Rotation keeps the kind; revocation
//! refuses the key. And CORS per environment: preflights, the origins a
//! page may call from, and what a refused origin's page can read.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::sync_client::SyncClient;
use flagstream_tests::STEP;
use flagstream_tests::ofrep::{Events, post, request};
use flagstream_tests::relay::Relay;
use serde_json::Value as Json;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const BULK: &str = "/ofrep/v1/evaluate/flags";

/// `flagctl ... -o json` as JSON.
fn ctl_json(relay: &Relay, env: &str, args: &[&str]) -> Json {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&relay.flagctl(env, &all)).expect("flagctl prints JSON")
}

/// The status a Subscribe with `key` ends with before any message.
async fn subscribe_status(relay: &Relay, key: &str) -> tonic::Status {
    let (tx, rx) = mpsc::channel(1);
    let hello = pb::Hello { sdk_key: key.into(), ..Default::default() };
    tx.send(pb::SubscribeRequest { kind: Some(pb::subscribe_request::Kind::Hello(hello)) }).await.unwrap();
    let mut sync = SyncClient::new(relay.channel().await);
    match tokio::time::timeout(STEP, sync.subscribe(ReceiverStream::new(rx))).await.expect("answered in time")
    {
        Err(status) => status,
        Ok(resp) => {
            let mut stream = resp.into_inner();
            match tokio::time::timeout(STEP, stream.message()).await.expect("in time") {
                Err(status) => status,
                Ok(m) => panic!("a client key opened Subscribe: {m:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_client_key_sees_only_flags_visible_to_clients() {
    let dir = tempfile::tempdir().unwrap();
    let relay =
        Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0", "--ofrep-event-spread", "20ms"]).await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    // The demo shows three flags to clients: hidden here, so what the key
    // sees is this test's.
    for demo in ["theme", "beta-banner", "max-upload-mb"] {
        relay.flagctl("demo", &["flag", "client-visible", demo, "false", "--yes"]);
    }
    relay.flagctl("demo", &["flag", "create", "shown", "--on", "--client-visible", "--yes"]);
    relay.flagctl("demo", &["flag", "create", "hidden", "--on", "--yes"]);

    let made = ctl_json(&relay, "demo", &["key", "create", "--client", "--name", "web"]);
    assert_eq!(made["client"], true, "{made}");
    let secret = made["secret"].as_str().expect("a secret").to_owned();
    assert!(secret.starts_with("fs_client_"), "{secret}");
    let id = made["id"].as_str().expect("an id").to_owned();
    let listed = ctl_json(&relay, "demo", &["key", "list"]);
    assert!(
        listed.as_array().unwrap().iter().any(|k| k["id"] == id.as_str() && k["client"] == true),
        "{listed}"
    );

    // Never a Subscribe stream: rules and every flag travel there.
    let status = subscribe_status(&relay, &secret).await;
    assert_eq!(status.code(), tonic::Code::PermissionDenied, "{status:?}");
    assert!(status.message().contains("OFREP"), "{}", status.message());

    let client = format!("Bearer {secret}");
    let server = format!("Bearer {}", relay.demo_key());
    let as_client = [("Authorization", client.as_str())];
    let ctx = r#"{"context":{"targetingKey":"u1"}}"#;
    let shown = post(addr, &format!("{BULK}/shown"), &as_client, ctx).await;
    assert_eq!((shown.status, shown.json()["value"].clone()), (200, Json::Bool(true)), "{}", shown.body);

    // A hidden flag: byte for byte a missing one (its key aside).
    let hidden = post(addr, &format!("{BULK}/hidden"), &as_client, ctx).await;
    let missing = post(addr, &format!("{BULK}/no-such-flag"), &as_client, ctx).await;
    assert_eq!((hidden.status, missing.status), (404, 404));
    assert_eq!(hidden.body.replace("hidden", "no-such-flag"), missing.body);
    assert_eq!(
        post(addr, &format!("{BULK}/hidden"), &[("Authorization", server.as_str())], ctx).await.status,
        200
    );

    let bulk = post(addr, BULK, &as_client, ctx).await;
    let keys: Vec<String> = bulk.json()["flags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, ["shown"], "only the visible flag: {}", bulk.body);
    for secret_word in ["hidden", "theme", "beta-testers", "rules", "segment"] {
        assert!(!bulk.body.contains(secret_word), "{secret_word} in {}", bulk.body);
    }
    let etag = bulk.header("etag").expect("an ETag").to_owned();
    let uri = bulk.json()["eventStreams"][0]["endpoint"]["requestUri"].as_str().unwrap().to_owned();
    let server_uri = post(addr, BULK, &[("Authorization", server.as_str())], ctx).await.json()["eventStreams"][0]
        ["endpoint"]["requestUri"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(uri, server_uri, "each key has its own stream token");

    let mut browser = Events::open(addr, &uri, &[]).await;
    assert!(browser.status.contains(" 200 "), "{}", browser.status);
    let start = browser.next_with("id: ").await;
    assert!(start.contains(":c"), "a client stream's id is its view's: {start}");
    let mut service = Events::open(addr, &server_uri, &[]).await;
    service.next_with("id: ").await;

    // A write to the hidden flag: the service hears of it, the browser
    // does not, and its ETag stands.
    relay.flagctl("demo", &["flag", "off", "hidden", "--yes"]);
    service.next_event().await;
    let again =
        post(addr, BULK, &[("Authorization", client.as_str()), ("If-None-Match", etag.as_str())], ctx).await;
    assert_eq!(again.status, 304, "a hidden write leaves the client's results: {}", again.body);

    // A write to the visible flag: the browser's next event is its.
    relay.flagctl("demo", &["flag", "off", "shown", "--yes"]);
    let (event, data) = browser.next_event().await;
    assert_ne!(event, start, "no event came for the hidden write (it would repeat the view's id)");
    assert_eq!(
        data,
        serde_json::json!({"type": "refetchEvaluation", "etag": event}),
        "no commit time either"
    );
    let fresh =
        post(addr, BULK, &[("Authorization", client.as_str()), ("If-None-Match", etag.as_str())], ctx).await;
    assert_eq!(fresh.status, 200);
    assert_eq!(fresh.json()["flags"][0]["value"], false);

    // Hidden from clients again: gone from their answers.
    relay.flagctl("demo", &["flag", "client-visible", "shown", "false", "--yes"]);
    browser.next_event().await;
    assert_eq!(post(addr, &format!("{BULK}/shown"), &as_client, ctx).await.status, 404);
    assert_eq!(post(addr, BULK, &as_client, ctx).await.json()["flags"], serde_json::json!([]));

    // Rotation keeps the kind; revocation refuses the key.
    let rotated = ctl_json(&relay, "demo", &["key", "rotate", &id, "--grace", "0s", "--yes"]);
    let new_secret = rotated["secret"].as_str().unwrap().to_owned();
    assert!(new_secret.starts_with("fs_client_") && rotated["client"] == true, "{rotated}");
    assert_eq!(post(addr, BULK, &as_client, ctx).await.status, 401, "the rotated-out key");
    assert_eq!(subscribe_status(&relay, &new_secret).await.code(), tonic::Code::PermissionDenied);
    let new_id = rotated["id"].as_str().unwrap().to_owned();
    relay.flagctl("demo", &["key", "revoke", &new_id, "--yes"]);
    let bearer = format!("Bearer {new_secret}");
    assert_eq!(post(addr, BULK, &[("Authorization", bearer.as_str())], ctx).await.status, 401);
    let audit = relay.flagctl("demo", &["audit", "log", "--limit", "50"]);
    assert!(audit.contains("sdk_key.create"), "{audit}");
}

#[tokio::test]
async fn cors_origins_are_per_environment() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--ofrep-listen", "127.0.0.1:0"]).await;
    let addr = relay.ofrep.expect("the relay names its OFREP address");
    relay.flagctl("demo", &["env", "create", "web"]);
    let web_key =
        ctl_json(&relay, "web", &["key", "create", "--client"])["secret"].as_str().unwrap().to_owned();
    let shown = relay.flagctl("web", &["env", "cors", "web", "--allow", "http://app.test:8080", "--yes"]);
    assert_eq!(shown.trim(), "http://app.test:8080");
    assert_eq!(relay.flagctl("web", &["env", "cors", "web"]).trim(), "http://app.test:8080");

    let (app, evil) = ("http://app.test:8080", "http://evil.test");
    let preflight = |origin: &'static str| async move {
        let headers = [
            ("Origin", origin),
            ("Access-Control-Request-Method", "POST"),
            ("Access-Control-Request-Headers", "authorization,content-type,if-none-match"),
        ];
        request(addr, "OPTIONS", BULK, &headers, "").await
    };
    let ok = preflight(app).await;
    assert_eq!(ok.status, 204, "{ok:?}");
    assert_eq!(ok.header("access-control-allow-origin"), Some(app));
    let allowed = ok.header("access-control-allow-headers").unwrap_or("").to_ascii_lowercase();
    for h in ["authorization", "content-type", "if-none-match", "x-api-key"] {
        assert!(allowed.contains(h), "{h} in {allowed}");
    }
    assert_eq!(ok.header("access-control-allow-credentials"), None, "never cookies");
    let refused = preflight(evil).await;
    assert_eq!((refused.status, refused.header("access-control-allow-origin")), (403, None));

    let ctx = r#"{"context":{"targetingKey":"u1"}}"#;
    let web = format!("Bearer {web_key}");
    let answer = post(addr, BULK, &[("Authorization", web.as_str()), ("Origin", app)], ctx).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.header("access-control-allow-origin"), Some(app));
    assert!(answer.header("access-control-expose-headers").unwrap_or("").contains("ETag"), "{answer:?}");
    assert!(answer.header("vary").unwrap_or("").contains("Origin"));

    // The demo environment does not list the origin: refused, and the
    // refusal unreadable to the page.
    let demo = format!("Bearer {}", relay.demo_key());
    let other = post(addr, BULK, &[("Authorization", demo.as_str()), ("Origin", app)], ctx).await;
    assert_eq!((other.status, other.header("access-control-allow-origin")), (403, None), "{}", other.body);
    assert!(other.body.contains("demo"), "{}", other.body);
    // Without an Origin (a server), the demo key works as before.
    assert_eq!(post(addr, BULK, &[("Authorization", demo.as_str())], ctx).await.status, 200);
    // An unknown key from an allowed origin: a 401 the page can read.
    let unknown = post(addr, BULK, &[("Authorization", "Bearer fs_client_nope"), ("Origin", app)], ctx).await;
    assert_eq!((unknown.status, unknown.header("access-control-allow-origin")), (401, Some(app)));

    // The change stream checks the origin against its environment too.
    let uri = answer.json()["eventStreams"][0]["endpoint"]["requestUri"].as_str().unwrap().to_owned();
    let stream = Events::open(addr, &uri, &[("Origin", app)]).await;
    assert!(stream.status.contains(" 200 "), "{}", stream.status);
    assert!(
        stream.headers.iter().any(|h| h.eq_ignore_ascii_case(&format!("access-control-allow-origin: {app}")))
    );
    let stream = Events::open(addr, &uri, &[("Origin", evil)]).await;
    assert!(stream.status.contains(" 403 "), "{}", stream.status);
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_origin\"}").await >= 3.0);

    // Bad origins are refused by name; the list stands.
    let mut admin = relay.admin().await;
    let bad = admin
        .set_cors_origins(pb::SetCorsOriginsRequest {
            environment: "web".into(),
            origins: vec!["http://ok.test".into(), "https://App.test/".into()],
        })
        .await
        .expect_err("an origin with a path and capitals is refused");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert!(bad.message().contains("origins[1]"), "{}", bad.message());
    assert_eq!(relay.flagctl("web", &["env", "cors", "web"]).trim(), "http://app.test:8080");
    relay.flagctl("web", &["env", "cors", "web", "--clear", "--yes"]);
    assert_eq!(preflight(app).await.status, 403, "no environment lists it any more");
    let audit = relay.flagctl("web", &["audit", "log"]);
    assert!(audit.contains("environment.cors"), "{audit}");
}
