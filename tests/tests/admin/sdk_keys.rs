//! SDK key lifecycle against a real relay: several keys per environment,
//! rotation with a grace period (both keys work, then the old one's
//! streams end and it is refused), revocation ending streams at once, and
//! the demo key file still working.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;
use tonic::Code;

/// Waits until the stream ends; returns why.
async fn ended(sub: &mut Subscriber) -> String {
    loop {
        if let Err(e) = sub.next(STEP).await {
            return e;
        }
    }
}

#[tokio::test]
async fn keys_are_created_rotated_with_grace_and_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut admin = relay.admin().await;
    let k1 = relay.create_env("shop").await;

    // A second key: both work.
    let k2 = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "shop".into(),
            name: "checkout-service".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(k2.key.as_ref().unwrap().id, "k2");
    let keys = admin
        .list_sdk_keys(pb::ListSdkKeysRequest { environment: "shop".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys.keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), ["k1", "k2"]);
    let mut on_k1 = Subscriber::connect(relay.channel().await, &k1, None).await.unwrap();
    on_k1.next(STEP).await.unwrap();
    let mut on_k2 = Subscriber::connect(relay.channel().await, &k2.secret, None).await.unwrap();
    on_k2.next(STEP).await.unwrap();

    // Rotate k1 with a grace period: old and new keys both work now.
    let rotated = admin
        .rotate_sdk_key(pb::RotateSdkKeyRequest {
            environment: "shop".into(),
            id: "k1".into(),
            grace_ms: 3_000,
            name: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rotated.old.as_ref().unwrap().expires_unix_ms > 0);
    let k3 = rotated.secret;
    let mut during_grace = Subscriber::connect(relay.channel().await, &k1, None).await.unwrap();
    during_grace.next(STEP).await.unwrap();
    let mut on_k3 = Subscriber::connect(relay.channel().await, &k3, None).await.unwrap();
    on_k3.next(STEP).await.unwrap();

    // After the grace period: every stream on k1 ends UNAUTHENTICATED, and
    // k1 is refused; k2 and k3 keep streaming.
    let why = ended(&mut on_k1).await;
    assert!(why.contains("Unauthenticated") || why.contains("SDK key k1 expired"), "{why}");
    assert!(ended(&mut during_grace).await.contains("k1 expired"));
    let err = Subscriber::connect(relay.channel().await, &k1, None).await.unwrap_err();
    assert_eq!(err.code(), Code::Unauthenticated);
    let keys = admin
        .list_sdk_keys(pb::ListSdkKeysRequest { environment: "shop".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys.keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(), ["k2", "k3"]);

    // Revoking k2 ends its stream at once.
    admin
        .revoke_sdk_key(pb::RevokeSdkKeyRequest { environment: "shop".into(), id: "k2".into() })
        .await
        .unwrap();
    assert!(ended(&mut on_k2).await.contains("k2 was revoked"));
    assert_eq!(
        Subscriber::connect(relay.channel().await, &k2.secret, None).await.unwrap_err().code(),
        Code::Unauthenticated
    );

    // k3 is unaffected, and survives a restart; so does the demo key file.
    on_k3.next(STEP).await.unwrap();
    let mut relay = relay;
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &[]).await;
    Subscriber::connect(relay.channel().await, &k3, None).await.unwrap();
    Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    assert_eq!(
        Subscriber::connect(relay.channel().await, &k1, None).await.unwrap_err().code(),
        Code::Unauthenticated
    );
}
