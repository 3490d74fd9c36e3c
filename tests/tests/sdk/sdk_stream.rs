//! The SDK against a real relay: ready from the stream, evaluates locally,
//! sees writes as they commit, reports changes, and counts fallbacks.

use std::time::Duration;

use flagstream::{Client, Context, ErrorKind, Source, Status};
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};

async fn client(relay: &Relay) -> Client {
    relay.sdk().build().unwrap()
}

/// Ready from the stream; demo flags evaluate as the engine says.
#[tokio::test]
async fn ready_from_stream_and_evaluates() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let c = client(&relay).await;
    let status = c.wait_ready(STEP).await;
    assert!(matches!(status, Status::Ready { source: Source::Stream, revision: 1, .. }), "{status:?}");
    let ctx = Context::new("user-9").with("country", "US").with("plan", "enterprise");
    assert!(c.bool("new-checkout", &ctx, false));
    let d = c.bool_detail("new-checkout", &ctx, false);
    assert_eq!((d.reason, d.rule_id.as_deref(), d.stale), ("RULE_MATCH", Some("us-enterprise"), false));
    assert_eq!(c.string("theme", &Context::new("user-42"), "?"), "dark");
    assert_eq!(c.int("max-upload-mb", &Context::new("u").with("plan", "pro"), 0), 100);
    // Fallbacks are counted by cause.
    assert!(!c.bool("no-such-flag", &ctx, false));
    assert_eq!(c.int("new-checkout", &ctx, 7), 7);
    let d = c.int_detail("new-checkout", &ctx, 7);
    assert_eq!(d.error, Some(ErrorKind::WrongType));
    let s = c.stats();
    assert_eq!((s.default_not_found, s.default_wrong_type), (1, 2));
}

/// A write reaches the client and its change listener within seconds.
#[tokio::test]
async fn writes_arrive_and_listeners_hear_them() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let c = client(&relay).await;
    c.wait_ready(STEP).await;
    let mut changes = c.changes();
    let ctx = Context::new("anyone");
    let mut flag_rx = c.watch_flag("live", ctx.clone().into_owned());
    assert_eq!(*flag_rx.borrow(), serde_json::Value::Null);
    let mut admin = relay.admin().await;
    let rev = put(&mut admin, "demo", bool_flag("live", true)).await.unwrap();
    let change = tokio::time::timeout(STEP, changes.recv()).await.unwrap().unwrap();
    assert_eq!(change.revision, rev);
    assert_eq!(&*change.flags, &["live".to_owned()]);
    assert!(c.bool("live", &ctx, false));
    tokio::time::timeout(STEP, flag_rx.changed()).await.unwrap().unwrap();
    assert_eq!(*flag_rx.borrow(), serde_json::Value::Bool(true));
    assert_eq!(c.stats().deltas_applied, 1);
}

/// With no relay reachable and no cache, the client is not ready, says
/// which endpoints failed and why, and serves the caller's defaults.
#[tokio::test]
async fn not_ready_says_why() {
    let c = Client::builder()
        .endpoints(["http://127.0.0.1:9"])
        .sdk_key("fs_sdk_x")
        .backoff_base(Duration::from_millis(50))
        .build()
        .unwrap();
    let status = c.wait_ready(Duration::from_millis(500)).await;
    match status {
        Status::Initializing { attempts } => {
            assert!(!attempts.is_empty());
            assert!(attempts[0].endpoint.contains("127.0.0.1:9"), "{attempts:?}");
            assert!(attempts[0].error.contains("connect"), "{attempts:?}");
        }
        other => panic!("expected Initializing, got {other:?}"),
    }
    assert!(c.bool("anything", &Context::new("u"), true));
    assert_eq!(c.stats().default_not_ready, 1);
}
