//! `WatchPropagation` (a read token) is bounded: a revision past the
//! environment's head is refused OUT_OF_RANGE naming the head; open
//! watches are capped per token and per relay (RESOURCE_EXHAUSTED naming
//! the option, counted); and revoking a token ends its open watches with
//! UNAUTHENTICATED.

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Admin, Relay, Token, bool_flag, put};
use flagstream_tests::subscriber::Subscriber;
use tonic::Code;
use tonic::codec::Streaming;

async fn read_token(admin: &mut Admin, name: &str) -> String {
    admin
        .create_token(pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Read as i32,
            environments: vec!["a".into()],
            replicate: false,
        })
        .await
        .unwrap()
        .into_inner()
        .secret
}

async fn watch(
    c: &mut Admin,
    revision: u64,
) -> Result<Streaming<pb::WatchPropagationResponse>, tonic::Status> {
    let req = pb::WatchPropagationRequest {
        environment: "a".into(),
        revision: Some(revision),
        min_interval_ms: 100,
    };
    let mut stream = c.watch_propagation(req).await?.into_inner();
    // The first report comes at once: the watch is open.
    let first = tokio::time::timeout(STEP, stream.message()).await.unwrap()?.unwrap();
    assert_eq!(first.propagation.unwrap().subscribers_acked, 0);
    Ok(stream)
}

#[tokio::test]
async fn watches_are_bounded_and_end_when_their_token_is_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--max-watches-per-token", "2", "--max-watches", "3"]).await;
    let key = relay.create_env("a").await;
    let mut admin = relay.admin().await;
    let head = put(&mut admin, "a", bool_flag("f", true)).await.unwrap();
    let (s1, s2) = (read_token(&mut admin, "watcher-1").await, read_token(&mut admin, "watcher-2").await);
    let mut one = AdminClient::with_interceptor(relay.channel().await, Token(s1));
    let mut two = AdminClient::with_interceptor(relay.channel().await, Token(s2));

    // A revision past the head: refused, naming the head.
    let e = watch(&mut one, head + 1000).await.unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert_eq!(
        e.message(),
        format!("revision: {} is past the head of environment \"a\", revision {head}", head + 1000)
    );

    // A subscriber that never acks keeps every watch of the next revision
    // open.
    let mut sdk = Subscriber::connect(relay.channel().await, &key, None).await.unwrap();
    sdk.next_change(STEP).await.unwrap(); // admitted: it has its snapshot
    let rev = put(&mut admin, "a", bool_flag("f", false)).await.unwrap();
    let mut open = vec![watch(&mut one, rev).await.unwrap(), watch(&mut one, rev).await.unwrap()];
    let e = watch(&mut one, rev).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(
        e.message(),
        "token \"watcher-1\": 2 propagation watches open, the limit is 2 (max-watches-per-token)"
    );
    let mut other = watch(&mut two, rev).await.unwrap();
    let e = watch(&mut two, rev).await.unwrap_err();
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert_eq!(e.message(), "3 propagation watches are open on this relay, the limit is 3 (max-watches)");
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_watches_per_token\"}").await, 1.0);
    assert_eq!(relay.metric("flagstream_limit_hits_total{limit=\"max_watches\"}").await, 1.0);

    // Revoking watcher-1 ends both its watches at once; watcher-2's goes on.
    admin.revoke_token(pb::RevokeTokenRequest { name: "watcher-1".into() }).await.unwrap();
    for stream in &mut open {
        let e = loop {
            match tokio::time::timeout(STEP, stream.message()).await.expect("the watch ends") {
                Ok(Some(_)) => continue,
                Ok(None) => panic!("ended without a status"),
                Err(e) => break e,
            }
        };
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        assert_eq!(e.message(), "token \"watcher-1\" was revoked; the propagation watch ended");
    }
    let p = tokio::time::timeout(STEP, other.message()).await.unwrap().unwrap().unwrap();
    assert_eq!(p.propagation.unwrap().revision, rev);
}
