//! Revocations on a shared PostgreSQL database either happen or are
//! reported as not happening: two relays revoking the last two admin
//! tokens at once leave one (the check and the removal are one
//! transaction, not a look at each relay's memory); a revocation the
//! database cannot take (it is down) is refused with UNAVAILABLE and the
//! token (or SDK key) keeps working, at this relay and after a restart,
//! until a revocation succeeds.

use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::postgres::Postgres;
use flagstream_tests::relay::{Admin, Relay, Token};
use flagstream_tests::subscriber::Subscriber;
use tonic::Code;

/// An admin client of `relay` authenticated with `secret`.
async fn admin_as(relay: &Relay, secret: &str) -> Admin {
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", relay.admin))
        .unwrap()
        .connect()
        .await
        .unwrap();
    pb::admin_client::AdminClient::with_interceptor(channel, Token(secret.to_owned()))
}

/// Creates an admin token for all environments; returns its secret.
async fn new_admin(admin: &mut Admin, name: &str) -> String {
    admin
        .create_token(pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Admin as i32,
            environments: vec![],
            replicate: false,
        })
        .await
        .expect("create token")
        .into_inner()
        .secret
}

async fn token_names(admin: &mut Admin) -> Vec<String> {
    admin
        .list_tokens(pb::ListTokensRequest {})
        .await
        .expect("list tokens")
        .into_inner()
        .tokens
        .into_iter()
        .map(|t| t.name)
        .collect()
}

/// Admin tokens for all environments the database holds.
fn stored_full_admins(pg: &Postgres) -> u64 {
    pg.sql(
        "flags",
        "SELECT count(*) FROM flagstream_tokens WHERE record->>'role' = 'admin' AND jsonb_array_length(record->'environments') = 0",
    )
    .trim()
    .parse()
    .expect("a count")
}

/// Round after round, relay A revokes one of the only two admin tokens
/// while relay B revokes the other: exactly one revocation succeeds, the
/// other is refused, and an admin token always remains.
#[tokio::test]
async fn two_relays_revoking_the_last_two_admin_tokens_leave_one() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let a = Relay::start(&dir.path().join("a"), &["--store", &url, "--demo", "false"]).await;
    let b = Relay::start(&dir.path().join("b"), &["--store", &url, "--demo", "false"]).await;
    let mut p = ("bootstrap".to_owned(), a.admin_token());
    let mut q = ("r0".to_owned(), new_admin(&mut admin_as(&a, &p.1).await, "r0").await);
    for round in 1..=12 {
        // Both relays know both tokens before the race.
        let at_b = admin_as(&b, &p.1).await;
        flagstream_tests::cluster::eventually_async("B knows the newest token", || {
            let mut at_b = at_b.clone();
            let name = q.0.clone();
            async move { token_names(&mut at_b).await.contains(&name) }
        })
        .await;
        assert_eq!(stored_full_admins(&pg), 2, "round {round} starts with two admin tokens");
        // A revokes p (as q), B revokes q (as p), at once.
        let (mut at_a, mut at_b) = (admin_as(&a, &q.1).await, admin_as(&b, &p.1).await);
        let (ra, rb) = tokio::join!(
            at_a.revoke_token(pb::RevokeTokenRequest { name: p.0.clone() }),
            at_b.revoke_token(pb::RevokeTokenRequest { name: q.0.clone() }),
        );
        assert_eq!(stored_full_admins(&pg), 1, "round {round}: one admin token remains ({ra:?}, {rb:?})");
        let survivor = match (&ra, &rb) {
            (Ok(_), Err(e)) => {
                assert!(matches!(e.code(), Code::FailedPrecondition | Code::Unauthenticated), "{e:?}");
                q.clone()
            }
            (Err(e), Ok(_)) => {
                assert!(matches!(e.code(), Code::FailedPrecondition | Code::Unauthenticated), "{e:?}");
                p.clone()
            }
            other => panic!("round {round}: exactly one revocation succeeds, got {other:?}"),
        };
        // The survivor works at both relays (once B's feed has caught up).
        flagstream_tests::cluster::eventually_async("the survivor is the only token at both relays", || {
            let (a, b, s) = (&a, &b, survivor.clone());
            async move {
                let (mut x, mut y) = (admin_as(a, &s.1).await, admin_as(b, &s.1).await);
                match (
                    x.list_tokens(pb::ListTokensRequest {}).await,
                    y.list_tokens(pb::ListTokensRequest {}).await,
                ) {
                    (Ok(x), Ok(y)) => x.into_inner().tokens.len() == 1 && y.into_inner().tokens.len() == 1,
                    _ => false,
                }
            }
        })
        .await;
        let name = format!("r{round}");
        let secret = new_admin(&mut admin_as(&a, &survivor.1).await, &name).await;
        (p, q) = (survivor, (name, secret));
    }
}

/// The database is down: revoking a token or an SDK key is refused with
/// UNAVAILABLE, and both keep working here (memory agrees with the disk);
/// a retry is refused the same way, not with NOT_FOUND. With the database
/// back the revocation succeeds, and holds after a restart.
#[tokio::test]
async fn a_revocation_the_database_refuses_is_reported_and_undone_nowhere() {
    let Some(pg) = Postgres::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let url = pg.database("flags");
    let relay = Relay::start(dir.path(), &["--store", &url]).await;
    let mut root = relay.admin().await;
    let ci = root
        .create_token(pb::CreateTokenRequest {
            name: "ci".into(),
            role: pb::TokenRole::Read as i32,
            environments: vec![],
            replicate: false,
        })
        .await
        .unwrap()
        .into_inner()
        .secret;
    let key = root
        .create_sdk_key(pb::CreateSdkKeyRequest {
            environment: "demo".into(),
            name: "svc".into(),
            client: false,
        })
        .await
        .unwrap()
        .into_inner();
    let key_id = key.key.as_ref().unwrap().id.clone();
    let list_flags = pb::ListFlagsRequest { environment: "demo".into(), ..Default::default() };
    let revoke_ci = || pb::RevokeTokenRequest { name: "ci".into() };
    let revoke_key = || pb::RevokeSdkKeyRequest { environment: "demo".into(), id: key_id.clone() };

    pg.stop("fast");
    for attempt in 0..2 {
        let e = root.revoke_token(revoke_ci()).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "attempt {attempt}: {e:?}");
        let e = root.revoke_sdk_key(revoke_key()).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "attempt {attempt}: {e:?}");
    }
    // Not revoked, so still working: the token authenticates, the key
    // subscribes.
    admin_as(&relay, &ci).await.list_flags(list_flags.clone()).await.expect("ci still works");
    let mut sub =
        Subscriber::connect(relay.channel().await, &key.secret, None).await.expect("the key still works");
    sub.next(STEP).await.expect("and streams");

    pg.start_again();
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        match root.revoke_token(revoke_ci()).await {
            Ok(_) => break,
            Err(e) if e.code() == Code::Unavailable && tokio::time::Instant::now() < deadline => {
                // The relay's pool reconnects on its own schedule and
                // announces nothing: retried as a client would, bounded.
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("revoking with the database back: {e:?}"),
        }
    }
    root.revoke_sdk_key(revoke_key()).await.expect("the key's revocation with the database back");
    let e = admin_as(&relay, &ci).await.list_flags(list_flags.clone()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = Subscriber::connect(relay.channel().await, &key.secret, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");

    // A restart reads the same from the database.
    let mut relay = relay;
    relay.sigterm();
    relay.wait(STEP).await;
    let relay = Relay::start(dir.path(), &["--store", &url]).await;
    assert_eq!(token_names(&mut relay.admin().await).await, ["bootstrap"]);
    let e = admin_as(&relay, &ci).await.list_flags(list_flags).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let e = Subscriber::connect(relay.channel().await, &key.secret, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
}
