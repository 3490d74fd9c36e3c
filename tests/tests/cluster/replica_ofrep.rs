//! OFREP on a replica: it answers from its copy, with the client-side
//! keys, the flags visible to clients and the CORS origins it follows from
//! the primary's catalog.

use std::time::Duration;

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::Cluster;
use flagstream_tests::ofrep::{Reply, post};

const BULK: &str = "/ofrep/v1/evaluate/flags";

/// Posts until the answer's status is `want` (the replica's catalog and
/// flags arrive by long poll and stream, with no event a test can await
/// over HTTP): a bounded poll, every 50 ms for at most `STEP`.
async fn until_status(addr: std::net::SocketAddr, path: &str, headers: &[(&str, &str)], want: u16) -> Reply {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let r = post(addr, path, headers, r#"{"context":{"targetingKey":"u1"}}"#).await;
        if r.status == want || tokio::time::Instant::now() > deadline {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

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
    c.primary.flagctl("demo", &["flag", "client-visible", "theme", "true", "--yes"]);

    let bearer = format!("Bearer {}", made.secret);
    let headers = [("Authorization", bearer.as_str()), ("Origin", "https://app.example")];
    let single = until_status(addr, &format!("{BULK}/theme"), &headers, 200).await;
    assert_eq!(single.status, 200, "the replica answers the client key: {}", single.body);
    assert_eq!(single.header("access-control-allow-origin"), Some("https://app.example"));
    let hidden = post(addr, &format!("{BULK}/new-checkout"), &headers, "{}").await;
    assert_eq!(hidden.status, 404, "{}", hidden.body);
    let bulk = post(addr, BULK, &headers, "{}").await.json();
    let keys: Vec<&str> =
        bulk["flags"].as_array().unwrap().iter().filter_map(|f| f["key"].as_str()).collect();
    assert_eq!(keys, ["theme"]);
}
