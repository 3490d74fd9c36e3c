//! OFREP on two relays sharing a PostgreSQL database: a client-side key
//! and CORS origins set at one relay hold at the other (through the
//! database's change feed), and an origin removed at one is refused at
//! the other.

use flagstream_proto::v1 as pb;
use flagstream_tests::ofrep::post_until;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::Relay;

const BULK: &str = "/ofrep/v1/evaluate/flags";

#[tokio::test]
async fn client_keys_and_origins_hold_on_every_relay_of_the_database() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = Relay::start(&dir.path().join("a"), &["--store", &url]).await;
    let b = Relay::start(
        &dir.path().join("b"),
        &["--store", &url, "--demo", "false", "--ofrep-listen", "127.0.0.1:0"],
    )
    .await;
    let addr = b.ofrep.expect("the relay names its OFREP address");
    let mut admin = a.admin().await;
    let made = admin
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "web".into(),
            client: true,
        })
        .await
        .unwrap()
        .into_inner();
    let set = |origins: Vec<String>| pb::SetCorsOriginsRequest { environment: "demo".into(), origins };
    admin.set_cors_origins(set(vec!["https://app.example".into()])).await.unwrap();

    let bearer = format!("Bearer {}", made.secret);
    let headers = [("Authorization", bearer.as_str()), ("Origin", "https://app.example")];
    let r = post_until(addr, BULK, &headers, "{}", 200).await;
    assert_eq!(r.status, 200, "the other relay has the key and the origin: {r:?}");
    assert_eq!(r.header("access-control-allow-origin"), Some("https://app.example"));
    let keys: Vec<String> =
        r.json()["flags"].as_array().unwrap().iter().map(|f| f["key"].as_str().unwrap().to_owned()).collect();
    assert_eq!(keys, ["beta-banner", "max-upload-mb", "theme"], "the flags visible to clients only");

    // The origin removed at the first relay: refused at the second.
    admin.set_cors_origins(set(vec![])).await.unwrap();
    let r = post_until(addr, BULK, &headers, "{}", 403).await;
    assert_eq!((r.status, r.header("access-control-allow-origin")), (403, None), "{r:?}");
}
