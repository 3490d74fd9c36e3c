//! The relay's status page, in a real browser against a real relay tree: a
//! primary and a replica (processes), an SDK on the replica evaluating a
//! kill switch with the wrong default and a flag that does not exist.
//! Headless Chromium (Debian's `chromium`, driven by playwright-core from
//! `tests/browser`) opens the primary's `/status`, is refused with a token
//! scoped to one environment (the page says why and keeps nothing), logs
//! in with a read token on all environments, and must show both relays,
//! the environment's propagation, the mismatched default and the missing
//! flag; it takes a screenshot (docs/status-page.png is one). Plain HTTP
//! checks the refusals (401 without or with a bad token, 403 scoped, each
//! counted) and the per-flag fallback metric.
//!
//! Without node, npm or Chromium at /usr/bin/chromium (or
//! `FLAGSTREAM_CHROMIUM`) the test fails, saying what to install.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use flagstream::{Client, Context};
use flagstream_proto::v1 as pb;
use flagstream_tests::STEP;
use flagstream_tests::cluster::{Cluster, eventually_async};
use flagstream_tests::relay::{Relay, bool_flag, put};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("browser")
}

fn chromium() -> PathBuf {
    std::env::var_os("FLAGSTREAM_CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

/// Runs `cmd`; panics with its output unless it succeeds.
fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{what}: could not start ({e}); the status page test needs Node.js >= 18 and npm on PATH")
    });
    assert!(
        out.status.success(),
        "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// `GET path` on the metrics listener; the status code and body.
async fn get(addr: SocketAddr, path: &str, authorization: Option<&str>) -> (u16, String) {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("metrics listener");
    // No credential: no authorization header at all.
    let auth = authorization.map(|a| format!("authorization: {a}\r\n")).unwrap_or_default();
    let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\n{auth}connection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await.expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("read");
    let code =
        out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status: {out}"));
    // A response without a body separator has no body (the callers then
    // fail on what they expect in it).
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (code, body)
}

async fn create_token(relay: &Relay, name: &str, envs: &[&str]) -> String {
    relay
        .admin()
        .await
        .create_token(pb::CreateTokenRequest {
            name: name.into(),
            role: pb::TokenRole::Read as i32,
            environments: envs.iter().map(|e| (*e).to_owned()).collect(),
            replicate: false,
        })
        .await
        .expect("create token")
        .into_inner()
        .secret
}

/// A caller's default the page must show as text, never as markup.
const HOSTILE: &str = "<img src=x onerror=\"document.title='owned'\">";

#[tokio::test]
async fn the_status_page_shows_the_tree_and_the_bad_defaults_in_chromium() {
    let chromium = chromium();
    assert!(
        chromium.exists(),
        "{} not found: the status page test needs Chromium (Debian: apt-get install chromium; tests/run installs it) \
         or FLAGSTREAM_CHROMIUM pointing at one",
        chromium.display()
    );
    let dir = tempfile::tempdir().unwrap();
    // Replicas forward usage every 200 ms instead of every minute.
    let c = Cluster::start(dir.path(), 1, &[], &["--upstream-usage-interval", "200ms"]).await;
    let primary = &c.primary;
    primary.create_env("staging").await;
    let mut admin = primary.admin().await;
    // Off: serves false to everyone, while callers pass true.
    let head = put(&mut admin, "demo", bool_flag("kill-switch", false)).await.unwrap();
    c.replicas[0].wait_head("demo", head).await;
    let sdk = Client::builder()
        .endpoints([c.replicas[0].url()])
        .sdk_key(primary.demo_key())
        .usage_interval(Duration::from_millis(200))
        .build()
        .unwrap();
    assert!(sdk.wait_ready(STEP).await.has_data());
    for i in 0..5 {
        let ctx = Context::new(format!("user-{i}"));
        assert!(!sdk.bool("kill-switch", &ctx, true));
        assert!(sdk.bool("no-such-flag", &ctx, true), "a missing flag falls back to the default");
    }
    // A default that is markup: the page must show it as text.
    assert_eq!(sdk.string("html-default", &Context::new("x"), HOSTILE), HOSTILE);
    // Asked for as a string: a wrong-type fallback of a real flag.
    assert_eq!(sdk.string("kill-switch", &Context::new("typed"), "x"), "x");

    // The refusals, over plain HTTP, each counted.
    let reader = create_token(primary, "status-reader", &[]).await;
    let scoped = create_token(primary, "demo-reader", &["demo"]).await;
    let addr = primary.metrics;
    let (code, body) = get(addr, "/status.json", None).await;
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("token required"), "{body}");
    let (code, body) = get(addr, "/status.json", Some("Bearer not-a-token")).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = get(addr, "/status.json", Some(&format!("Bearer {scoped}"))).await;
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("all environments"), "the refusal says what is needed: {body}");
    assert!(primary.metric("flagstream_status_page_requests_total{result=\"unauthenticated\"}").await >= 2.0);
    assert!(primary.metric("flagstream_status_page_requests_total{result=\"forbidden\"}").await >= 1.0);
    let (code, _) = get(addr, "/status/nothing-here", None).await;
    assert_eq!(code, 404);

    // The fallbacks reach the primary's per-flag metric: the real flag's
    // under its key, the two keys that are no flag (5 + 1) under `_unknown`.
    let demo = "flagstream_usage_flag_fallbacks_total{environment=\"demo\",flag=";
    eventually_async("the per-flag fallbacks at the primary", || async {
        primary.try_metric(&format!("{demo}\"_unknown\"}}")).await == Some(6.0)
            && primary.try_metric(&format!("{demo}\"kill-switch\"}}")).await == Some(1.0)
    })
    .await;

    run(
        "npm ci (tests/browser)",
        Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(browser_dir()),
    );
    let screenshot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&screenshot); // absent on a first run: nothing to remove
    let cfg = serde_json::json!({
        "url": format!("http://{addr}/status"),
        "token": reader,
        "scoped_token": scoped,
        "nodes": 2,
        "flags": ["kill-switch", "no-such-flag", "html-default"],
        "screenshot": screenshot,
    });
    let out = run(
        "node status_page.mjs (headless Chromium)",
        Command::new("node")
            .arg("status_page.mjs")
            .arg(cfg.to_string())
            .current_dir(browser_dir())
            .env("FLAGSTREAM_CHROMIUM", &chromium),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // No output at all fails the parse below, with the output shown.
    let page: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the script's output is not JSON ({e}): {stdout}"));
    println!("{page:#}");

    assert_eq!(page["page_status"], 200);
    let csp = page["csp"].as_str().expect("a content security policy");
    assert!(csp.contains("default-src 'none'") && csp.contains("script-src 'self'"), "{csp}");
    // The refusal is shown and no token is kept.
    let refusal = page["login_error"].as_str().unwrap();
    assert!(refusal.contains("may not read the status page"), "{refusal}");
    let nowhere = |when: &str| {
        let s = &page[when];
        assert_eq!(s["session"], serde_json::json!({}), "{when}: {s}");
        assert_eq!(s["local"], serde_json::json!({}), "{when}: {s}");
        assert_eq!(s["cookies"], 0, "{when}: {s}");
        assert_eq!(s["field"], "", "{when}: the form field is cleared: {s}");
    };
    nowhere("stored_after_refusal");
    // The accepted token is kept in this tab's session storage under one
    // key, and nowhere else: not in local storage (other tabs, after the
    // browser closes), not in a cookie, not in the address, not in the form.
    let kept = &page["stored_after_login"];
    assert_eq!(kept["session"], serde_json::json!({ "flagstream-status-token": reader }), "{kept}");
    assert_eq!(kept["local"], serde_json::json!({}), "{kept}");
    assert_eq!(kept["cookies"], 0, "{kept}");
    assert!(!kept["url"].as_str().unwrap().contains(reader.as_str()), "{kept}");
    assert_eq!(kept["field"], "", "{kept}");
    assert_eq!(page["login_visible"], false);
    // Nothing fails in the page and nothing leaves the relay's origin.
    assert_eq!(page["console_errors"], serde_json::json!([]), "console errors");
    // The one failed load is the refused token's.
    assert_eq!(page["failed_responses"], serde_json::json!(["403 /status.json"]));
    assert_eq!(page["page_errors"], serde_json::json!([]), "page errors");
    assert_eq!(page["requests_elsewhere"], serde_json::json!([]));

    // Both relays, the primary first, the replica drawn under it.
    let tree = page["tree"].as_array().unwrap();
    assert_eq!(tree[0]["role"], "primary");
    assert_eq!(tree[1]["role"], "replica");
    let replica_row = tree[1]["text"].as_str().unwrap();
    assert!(replica_row.contains("└─"), "the replica is drawn under the primary: {replica_row}");
    assert!(replica_row.contains(&format!("demo r{head} (lag 0")), "{replica_row}");
    assert!(replica_row.contains("1 SDKs"), "the replica's SDK: {replica_row}");
    // Its data age: seconds (its upstream link is live), not the age of the
    // empty environment it held before its first data.
    let age = replica_row.split(&format!("demo r{head} (lag 0, ")).nth(1).and_then(|r| r.split(',').next());
    assert!(
        age.and_then(|a| a.strip_suffix('s')).is_some_and(|s| s.parse::<u64>().is_ok_and(|s| s < 60)),
        "data age {age:?}: {replica_row}"
    );
    assert!(tree[0]["text"].as_str().unwrap().contains(env!("CARGO_PKG_VERSION")));

    // Both environments; demo lists the two bad flags.
    let envs = page["environments"].as_array().unwrap();
    let names: Vec<&str> = envs.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["demo", "staging"]);
    let demo = &envs[0];
    // The latest revisions' propagation, newest first, each once.
    let revisions: Vec<u64> =
        demo["revisions"].as_array().unwrap().iter().map(|r| r.as_u64().unwrap()).collect();
    assert_eq!(revisions.first(), Some(&head), "{demo}");
    assert!(revisions.windows(2).all(|w| w[0] > w[1]), "each revision once, newest first: {revisions:?}");
    let flags = demo["flags"].as_array().unwrap();
    let row = |key: &str| flags.iter().find(|f| f["flag"] == key).unwrap_or_else(|| panic!("{key}: {demo}"));
    let kill = row("kill-switch");
    assert_eq!(kill["mismatch"], true);
    assert!(kill["text"].as_str().unwrap().contains("DEFAULT MISMATCH"), "{kill}");
    let missing = row("no-such-flag");
    assert_eq!(missing["mismatch"], false);
    // Cells: flag, missing, wrong type, malformed, not ready, defaults, served most.
    let cells = |row: &serde_json::Value| -> Vec<String> {
        row["cells"].as_array().unwrap().iter().map(|c| c.as_str().unwrap().to_owned()).collect()
    };
    assert_eq!(cells(kill)[1..5], ["0", "1", "0", "0"], "the wrong-type fallback: {kill}");
    assert_eq!(cells(kill)[6], "false", "served most: {kill}");
    assert!(missing["text"].as_str().unwrap().contains("(no such flag)"), "{missing}");
    assert_eq!(cells(missing)[1..5], ["5", "0", "0", "0"], "five missing fallbacks: {missing}");
    let html = row("html-default");
    assert!(
        html["text"].as_str().unwrap().contains(&serde_json::to_string(HOSTILE).unwrap()),
        "as text: {html}"
    );
    assert_eq!(page["images"], 0, "the default was not parsed as markup");
    assert_eq!(page["title"], "flagstream relay status");
    assert!(envs[1]["text"].as_str().unwrap().contains("None."), "staging has nothing to show");

    // Forgetting the token clears it.
    nowhere("stored_after_forget");
    let png = std::fs::read(&screenshot).expect("the screenshot was written");
    assert!(png.starts_with(b"\x89PNG"), "a PNG screenshot");
}
