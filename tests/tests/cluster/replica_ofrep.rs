//! OFREP on a replica: it answers from its copy, with the client-side
//! keys, the flags visible to clients and the CORS origins it follows from
//! the primary's catalog.

use flagstream_proto::v1 as pb;
use flagstream_tests::cluster::Cluster;
use flagstream_tests::ofrep::{post, post_until};

const BULK: &str = "/ofrep/v1/evaluate/flags";

#[tokio::test]
async fn a_replica_serves_client_keys_visibility_and_origins_from_the_primary() {
    let dir = tempfile::tempdir().unwrap();
    let c = Cluster::start(dir.path(), 1, &[], &["--ofrep-listen", "127.0.0.1:0"]).await;
    let addr = c.replicas[0].ofrep.expect("the replica names its OFREP address");
    let mut admin = c.primary.admin().await;
    let made = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "web".into(),
            client: true,
        })
        .await
        .unwrap()
        .into_inner();
    admin
        .set_cors_origins(pb::SetCorsOriginsRequest {
            environment: "demo".into(),
            origins: vec!["https://app.example".into()],
        })
        .await
        .unwrap();
    // Shown to clients at the primary (the demo hides it).
    c.primary.flagctl("demo", &["flag", "client-visible", "new-checkout", "true", "--yes"]);

    let bearer = format!("Bearer {}", made.secret);
    let headers = [("Authorization", bearer.as_str()), ("Origin", "https://app.example")];
    let single = post_until(
        addr,
        &format!("{BULK}/new-checkout"),
        &headers,
        r#"{"context":{"targetingKey":"u1"}}"#,
        200,
    )
    .await;
    assert_eq!(single.status, 200, "the replica answers the client key: {}", single.body);
    assert_eq!(single.header("access-control-allow-origin"), Some("https://app.example"));
    let hidden = post(addr, &format!("{BULK}/search-ranking"), &headers, "{}").await;
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    let bulk = post(addr, BULK, &headers, "{}").await.json();
    let keys: Vec<&str> =
        bulk["flags"].as_array().unwrap().iter().filter_map(|f| f["key"].as_str()).collect();
    assert_eq!(
        keys,
        ["beta-banner", "max-upload-mb", "new-checkout", "theme"],
        "the demo's three and the one shown"
    );
}

/// A relay from before client-side keys would take one for a server-side
/// key (every flag, Subscribe): the catalog leaves them out for a caller
/// that does not say it knows them.
#[tokio::test]
async fn the_catalog_sends_client_keys_only_to_relays_that_know_them() {
    let dir = tempfile::tempdir().unwrap();
    let primary = flagstream_tests::relay::Relay::start(dir.path(), &[]).await;
    let mut admin = primary.admin().await;
    admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "web".into(),
            client: true,
        })
        .await
        .unwrap();
    let token = flagstream_tests::cluster::replicate_token(&primary, dir.path(), "follower").await;
    let secret = std::fs::read_to_string(token).unwrap().trim().to_owned();
    let mut replication = pb::replication_client::ReplicationClient::with_interceptor(
        primary.channel().await,
        flagstream_tests::relay::Token(secret),
    );
    let kinds = |c: pb::Catalog| -> Vec<bool> {
        let demo = c.environments.into_iter().find(|e| e.name == "demo").expect("the demo environment");
        demo.sdk_keys.iter().map(|k| k.key.as_ref().expect("a key").client).collect()
    };
    let ask =
        |client_keys: bool| pb::GetCatalogRequest { known_version: String::new(), wait_ms: 0, client_keys };
    let old = replication.get_catalog(ask(false)).await.unwrap().into_inner();
    assert_eq!(kinds(old), [false], "an older relay gets the server-side key only");
    let new = replication.get_catalog(ask(true)).await.unwrap().into_inner();
    assert_eq!(kinds(new), [false, true]);
}
