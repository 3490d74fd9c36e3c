//! Every refusal is visible: each non-OK status the relay answers, on any
//! service, is counted by service, method and code, and logged with its
//! cause; a flood of refusals is counted in full but logged at a bounded
//! rate.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, Token, bool_flag, put};
use flagstream_tests::subscriber::Subscriber;
use tonic::Code;

fn refusals(service: &str, method: &str, code: &str) -> String {
    format!("flagstream_grpc_refusals_total{{service=\"{service}\",method=\"{method}\",code=\"{code}\"}}")
}

const ADMIN: &str = "flagstream.v1.Admin";

#[tokio::test]
async fn every_non_ok_status_is_counted_and_logged_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;

    let mut guess = AdminClient::with_interceptor(relay.channel().await, Token("fs_admin_guess".into()));
    let err = guess.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let err = admin
        .create_environment(pb::CreateEnvironmentRequest { name: "demo".into(), description: String::new() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::AlreadyExists);
    let err = admin
        .get_flag(pb::GetFlagRequest { environment: "demo".into(), key: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
    // Over the 8 MiB admin request limit: refused by the transport layer
    // before any relay code, and still counted.
    let mut huge = bool_flag("huge", true);
    huge.description = "x".repeat(9 << 20);
    let err = put(&mut admin, "demo", huge).await.unwrap_err();
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    // Subscribe: a refusal before the stream (Trailers-Only) and a stream
    // that ends with an error in its trailers.
    let err = Subscriber::connect(relay.channel().await, "fs_sdk_guess", None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let key = relay.create_env("doomed").await;
    let mut sub = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sub.next(STEP).await.unwrap();
    admin
        .delete_environment(pb::DeleteEnvironmentRequest { name: "doomed".into(), expected_revision: None })
        .await
        .unwrap();
    loop {
        if let Err(e) = sub.next(STEP).await {
            assert!(e.contains("was deleted"), "{e}");
            break;
        }
    }

    for (method, code) in [
        ("ListEnvironments", "UNAUTHENTICATED"),
        ("CreateEnvironment", "ALREADY_EXISTS"),
        ("GetFlag", "NOT_FOUND"),
        ("PutFlag", "OUT_OF_RANGE"),
    ] {
        assert_eq!(relay.metric(&refusals(ADMIN, method, code)).await, 1.0, "{method} {code}");
    }
    let sync = "flagstream.v1.Sync";
    assert_eq!(relay.metric(&refusals(sync, "Subscribe", "UNAUTHENTICATED")).await, 1.0);
    assert_eq!(relay.metric(&refusals(sync, "Subscribe", "NOT_FOUND")).await, 1.0);

    let log = relay.log();
    for cause in
        ["admin token is not valid", "environment \"demo\" already exists", "unknown SDK key", "was deleted"]
    {
        assert!(
            log.lines().any(|l| l.contains("request refused") && l.contains(cause)),
            "no refusal logged with cause {cause:?}:\n{log}"
        );
    }
}

#[tokio::test]
async fn a_flood_of_bad_tokens_is_counted_in_full_and_logged_at_a_bounded_rate() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let channel = relay.channel().await;
    let mut tasks = Vec::new();
    for t in 0..4 {
        let mut guess = AdminClient::with_interceptor(channel.clone(), Token(format!("fs_admin_guess{t}")));
        tasks.push(tokio::spawn(async move {
            for _ in 0..250 {
                let err = guess.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err();
                assert_eq!(err.code(), Code::Unauthenticated);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(relay.metric(&refusals(ADMIN, "ListEnvironments", "UNAUTHENTICATED")).await, 1_000.0);
    let count = |log: &str| -> (u64, u64) {
        let lines = log.lines().filter(|l| l.contains("request refused"));
        let logged = lines.clone().filter(|l| !l.contains("lines suppressed")).count() as u64;
        // Each line says how many were dropped before it.
        let dropped = lines
            .filter_map(|l| {
                l.split("suppressed=")
                    .nth(1)?
                    .split(|c: char| !c.is_ascii_digit())
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .sum();
        (logged, dropped)
    };
    let (logged, _) = count(&relay.log());
    assert!(logged < 1_000, "every refusal of the flood was logged ({logged} lines)");
    // Within a second the relay reports the rest it dropped: logged and
    // reported-dropped add up to every refusal.
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let (logged, dropped) = count(&relay.log());
        if logged + dropped == 1_000 {
            break;
        }
        assert!(logged + dropped < 1_000, "{logged} logged + {dropped} dropped > 1000");
        assert!(tokio::time::Instant::now() < deadline, "only {logged} logged + {dropped} reported dropped");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
