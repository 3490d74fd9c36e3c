//! Least privilege, for real: named admin tokens with roles and
//! environments (every role × operation), the audit principal derived from
//! the token, `flagctl` refusing with exit 7 and writing nothing, and safe
//! defaults (no demo unless asked, no default environment in flagctl).

use std::process::Command;

use flagstream_proto::v1 as pb;
use flagstream_proto::v1::admin_client::AdminClient;
use flagstream_tests::relay::{Admin, Relay, Token, bool_flag};
use tonic::{Code, Status};

async fn client(relay: &Relay, secret: &str) -> Admin {
    AdminClient::with_interceptor(relay.channel().await, Token(secret.to_owned()))
}

async fn token(admin: &mut Admin, name: &str, role: pb::TokenRole, envs: &[&str]) -> String {
    admin
        .create_token(pb::CreateTokenRequest {
            name: name.into(),
            role: role as i32,
            environments: envs.iter().map(|e| (*e).to_owned()).collect(),
            replicate: false,
        })
        .await
        .unwrap_or_else(|e| panic!("create token {name}: {e}"))
        .into_inner()
        .secret
}

/// Every Admin call, made by `c` on environment `env` (`tag` keeps the
/// names of things it creates apart). Returns the call's name, the role it
/// needs, and whether it needs all environments.
async fn every_call(
    c: &mut Admin,
    env: &str,
    tag: &str,
) -> Vec<(&'static str, pb::TokenRole, bool, Result<(), Status>)> {
    use pb::TokenRole::{Admin as A, Read as R, Write as W};
    let e = || env.to_owned();
    let put = |key: String| pb::PutFlagRequest {
        environment: env.to_owned(),
        flag: Some(bool_flag(&key, true)),
        expected_version: None,
        comment: String::new(),
    };
    let mut out = Vec::new();
    macro_rules! call {
        ($name:expr, $role:expr, $all:expr, $fut:expr) => {
            out.push(($name, $role, $all, $fut.await.map(|_| ())));
        };
    }
    call!(
        "GetFlag",
        R,
        false,
        c.get_flag(pb::GetFlagRequest { environment: e(), key: "new-checkout".into() })
    );
    call!(
        "ListFlags",
        R,
        false,
        c.list_flags(pb::ListFlagsRequest { environment: e(), ..Default::default() })
    );
    call!(
        "ListSegments",
        R,
        false,
        c.list_segments(pb::ListSegmentsRequest { environment: e(), ..Default::default() })
    );
    call!(
        "GetSegment",
        R,
        false,
        c.get_segment(pb::GetSegmentRequest { environment: e(), key: "beta-testers".into() })
    );
    call!(
        "ListAudit",
        R,
        false,
        c.list_audit(pb::ListAuditRequest { environment: e(), ..Default::default() })
    );
    call!("VerifyAudit", R, false, c.verify_audit(pb::VerifyAuditRequest { environment: e() }));
    call!(
        "GetPropagation",
        R,
        false,
        c.get_propagation(pb::GetPropagationRequest { environment: e(), revision: None })
    );
    call!(
        "Evaluate",
        R,
        false,
        c.evaluate(pb::EvaluateRequest {
            environment: e(),
            flag_key: "new-checkout".into(),
            ..Default::default()
        })
    );
    call!("PutFlag", W, false, c.put_flag(put(format!("{tag}-put"))));
    call!(
        "PatchFlag",
        W,
        false,
        c.patch_flag(pb::PatchFlagRequest {
            environment: e(),
            key: "new-checkout".into(),
            expected_version: None,
            ops: vec![pb::FlagPatch { op: Some(pb::flag_patch::Op::SetOn(true)) }],
            comment: String::new(),
        })
    );
    call!(
        "DeleteFlag",
        W,
        false,
        c.delete_flag(pb::DeleteFlagRequest {
            environment: e(),
            key: format!("{tag}-put"),
            expected_version: None,
            comment: String::new()
        })
    );
    call!(
        "PutSegment",
        W,
        false,
        c.put_segment(pb::PutSegmentRequest {
            environment: e(),
            segment: Some(pb::Segment { key: format!("{tag}-seg"), ..Default::default() }),
            expected_version: None,
            comment: String::new(),
        })
    );
    call!(
        "PatchSegment",
        W,
        false,
        c.patch_segment(pb::PatchSegmentRequest {
            environment: e(),
            key: format!("{tag}-seg"),
            expected_version: None,
            ops: vec![pb::SegmentPatch {
                op: Some(pb::segment_patch::Op::AddIncluded(pb::ContextKeys {
                    keys: vec!["u".into()],
                    ..Default::default()
                })),
            }],
            comment: String::new(),
        })
    );
    call!(
        "DeleteSegment",
        W,
        false,
        c.delete_segment(pb::DeleteSegmentRequest {
            environment: e(),
            key: format!("{tag}-seg"),
            expected_version: None,
            comment: String::new(),
        })
    );
    call!(
        "PutSegment",
        W,
        false,
        c.put_segment(pb::PutSegmentRequest {
            environment: e(),
            segment: Some(pb::Segment { key: format!("{tag}-seg"), ..Default::default() }),
            expected_version: None,
            comment: String::new(),
        })
    );
    call!(
        "WatchPropagation",
        R,
        false,
        c.watch_propagation(pb::WatchPropagationRequest {
            environment: e(),
            revision: None,
            min_interval_ms: 100
        })
    );
    call!("ListEnvironments", R, false, c.list_environments(pb::ListEnvironmentsRequest::default()));
    call!("Status", R, false, c.status(pb::StatusRequest {}));
    call!(
        "Batch",
        W,
        false,
        c.batch(pb::BatchRequest {
            environment: e(),
            ops: vec![pb::BatchOp {
                op: Some(pb::batch_op::Op::DeleteSegment(pb::DeleteSegmentOp {
                    key: format!("{tag}-seg"),
                    expected_version: None
                })),
            }],
            expected_revision: None,
            comment: String::new(),
        })
    );
    call!(
        "CreateSdkKey",
        A,
        false,
        c.create_sdk_key(pb::CreateSdkKeyRequest { environment: e(), name: tag.into(), client: false })
    );
    call!("ListSdkKeys", A, false, c.list_sdk_keys(pb::ListSdkKeysRequest { environment: e() }));
    call!(
        "RevokeSdkKey",
        A,
        false,
        c.revoke_sdk_key(pb::RevokeSdkKeyRequest { environment: e(), id: "k-none".into() })
    );
    call!(
        "RotateSdkKey",
        A,
        false,
        c.rotate_sdk_key(pb::RotateSdkKeyRequest {
            environment: e(),
            id: "k-none".into(),
            grace_ms: 0,
            name: String::new()
        })
    );
    call!(
        "CreateEnvironment",
        A,
        true,
        c.create_environment(pb::CreateEnvironmentRequest {
            name: format!("{tag}-env"),
            description: String::new()
        })
    );
    call!(
        "DeleteEnvironment",
        A,
        true,
        c.delete_environment(pb::DeleteEnvironmentRequest {
            name: format!("{tag}-env"),
            expected_revision: None
        })
    );
    call!(
        "CreateToken",
        A,
        true,
        c.create_token(pb::CreateTokenRequest {
            name: format!("{tag}-tok"),
            role: pb::TokenRole::Read as i32,
            environments: vec![],
            replicate: false
        })
    );
    call!("ListTokens", A, true, c.list_tokens(pb::ListTokensRequest {}));
    call!("RevokeToken", A, true, c.revoke_token(pb::RevokeTokenRequest { name: format!("{tag}-tok") }));
    out
}

#[tokio::test]
async fn every_role_and_operation_combination_is_enforced() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut boot = relay.admin().await;
    relay.create_env("staging").await;
    let tokens = [
        ("reader", pb::TokenRole::Read, vec![]),
        ("writer", pb::TokenRole::Write, vec![]),
        ("admin-all", pb::TokenRole::Admin, vec![]),
        ("demo-admin", pb::TokenRole::Admin, vec!["demo"]),
        ("staging-writer", pb::TokenRole::Write, vec!["staging"]),
    ];
    for (name, role, envs) in &tokens {
        let secret = token(&mut boot, name, *role, envs).await;
        let mut c = client(&relay, &secret).await;
        let results = every_call(&mut c, "demo", name).await;
        let names: std::collections::HashSet<&str> = results.iter().map(|r| r.0).collect();
        assert_eq!(names.len(), 27, "every Admin call that takes a role (all but GetCatalog): {names:?}");
        for (call, needs, needs_all, result) in results {
            let in_scope = envs.is_empty() || (!needs_all && envs.contains(&"demo"));
            // Listing environments and status: any token, filtered to its
            // environments (checked below).
            let everyone = matches!(call, "ListEnvironments" | "Status");
            let allowed = everyone || (*role as i32 >= needs as i32 && in_scope);
            match result {
                Err(s) if s.code() == Code::PermissionDenied => {
                    assert!(!allowed, "{name} was refused {call}: {}", s.message());
                    assert!(s.message().contains(&format!("token {name:?} may not")), "{}", s.message());
                }
                // Allowed: it ran past authorization, and succeeded or found
                // nothing to act on (a few calls name things that do not
                // exist, e.g. key `k-none`); any other failure is a bug.
                Ok(()) => assert!(allowed, "{name} ({role:?}, {envs:?}) was allowed {call}"),
                Err(s) if s.code() == Code::NotFound => {
                    assert!(allowed, "{name} ({role:?}, {envs:?}) was allowed {call}: {s:?}")
                }
                Err(s) => panic!("{name}: {call} failed with something other than PERMISSION_DENIED: {s:?}"),
            }
        }
        // Reading the catalog needs the replicate scope, whatever the role.
        let mut r = flagstream_proto::v1::replication_client::ReplicationClient::with_interceptor(
            relay.channel().await,
            Token(secret.clone()),
        );
        let e = r.get_catalog(pb::GetCatalogRequest::default()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{name}: {e:?}");
        assert!(e.message().contains("replicate scope"), "{}", e.message());
    }
    // Scoped tokens see only their environments.
    let secret = token(&mut boot, "only-staging", pb::TokenRole::Read, &["staging"]).await;
    let mut c = client(&relay, &secret).await;
    let envs = c.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap().into_inner();
    assert_eq!(envs.environments.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["staging"]);
    let status = c.status(pb::StatusRequest {}).await.unwrap().into_inner();
    assert_eq!(status.environments.len(), 1);
    // The bootstrap token is an admin token named `bootstrap`; the last
    // admin of all environments cannot be revoked... once admin-all is gone.
    let list = boot.list_tokens(pb::ListTokensRequest {}).await.unwrap().into_inner();
    let b = list.tokens.iter().find(|t| t.name == "bootstrap").expect("bootstrap token");
    assert_eq!((b.role, b.environments.len()), (pb::TokenRole::Admin as i32, 0));
    boot.revoke_token(pb::RevokeTokenRequest { name: "admin-all".into() }).await.unwrap();
    let e = boot.revoke_token(pb::RevokeTokenRequest { name: "bootstrap".into() }).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    // A revoked token stops working at once.
    let e = client(&relay, &secret).await;
    boot.revoke_token(pb::RevokeTokenRequest { name: "only-staging".into() }).await.unwrap();
    let mut e = e;
    assert_eq!(
        e.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    // Refusals are counted.
    assert!(relay.metric("flagstream_grpc_refusals_total{service=\"flagstream.v1.Admin\",method=\"PutFlag\",code=\"PERMISSION_DENIED\"}").await >= 1.0);
}

#[tokio::test]
async fn the_audit_principal_is_the_token_not_the_header() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut boot = relay.admin().await;
    let secret = token(&mut boot, "ci-pipeline", pb::TokenRole::Write, &["demo"]).await;
    // The fixture's interceptor also sends `x-flagstream-actor: test-suite`.
    let mut ci = client(&relay, &secret).await;
    ci.put_flag(pb::PutFlagRequest {
        environment: "demo".into(),
        flag: Some(bool_flag("by-ci", true)),
        expected_version: None,
        comment: "from CI".into(),
    })
    .await
    .unwrap();
    let audit = boot
        .list_audit(pb::ListAuditRequest {
            environment: "demo".into(),
            key: "by-ci".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let e = &audit.entries[0];
    assert_eq!((e.actor.as_str(), e.on_behalf_of.as_str()), ("ci-pipeline", "test-suite"));
    assert_eq!(e.hash.len(), 64);
}

fn flagctl() -> Command {
    let bin = flagstream_tests::relay::relay_binary()
        .with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX));
    let mut c = Command::new(bin);
    c.args(["--config", "/nonexistent/flagctl.toml"])
        .env_remove("FLAGSTREAM_ENV")
        .env_remove("FLAGSTREAM_TOKEN");
    c
}

#[tokio::test]
async fn flagctl_refuses_outside_the_token_role_with_exit_7_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut boot = relay.admin().await;
    let reader = token(&mut boot, "auditor", pb::TokenRole::Read, &[]).await;
    let before = boot
        .get_flag(pb::GetFlagRequest { environment: "demo".into(), key: "new-checkout".into() })
        .await
        .unwrap()
        .into_inner();
    let out = flagctl()
        .args(["--relay", &relay.url(), "-e", "demo", "flag", "off", "new-checkout", "--yes"])
        .env("FLAGSTREAM_TOKEN", &reader)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(
        stderr.contains("token \"auditor\" may not write flags") && stderr.contains("needs role write"),
        "{stderr}"
    );
    let after = boot
        .get_flag(pb::GetFlagRequest { environment: "demo".into(), key: "new-checkout".into() })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(before, after, "a refused write changed the flag");

    // No environment named: refused before anything is sent (exit 2).
    let out = flagctl()
        .args(["--relay", &relay.url(), "flag", "off", "new-checkout", "--yes"])
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no environment"));

    // flagctl token create/list with --env repeated.
    let out = flagctl()
        .args([
            "--relay",
            &relay.url(),
            "token",
            "create",
            "deployer",
            "--role",
            "write",
            "--env",
            "demo",
            "--env",
            "demo",
        ])
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let secret = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(secret.starts_with("fs_admin_"), "{secret}");
    let out = flagctl()
        .args(["--relay", &relay.url(), "token", "list", "-o", "json"])
        .env("FLAGSTREAM_TOKEN", relay.admin_token())
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains("\"deployer\"") && list.contains("\"write\""), "{list}");
    assert!(!list.contains(&secret), "token list printed a secret");
}

#[tokio::test]
async fn serve_seeds_nothing_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &["--demo", "false"]).await;
    let mut admin = relay.admin().await;
    let envs = admin.list_environments(pb::ListEnvironmentsRequest::default()).await.unwrap().into_inner();
    assert!(envs.environments.is_empty(), "{:?}", envs.environments);
    assert!(!relay.data_dir.join("demo-sdk-key").exists());
}
