//! OpenFeature's own OFREP providers against real relays, installed from
//! their registries by the test (npm: `tests/ofrep-clients`, locked;
//! PyPI: `openfeature-provider-ofrep`, pinned in `python::PINS`):
//!
//! - the web provider with `@openfeature/web-sdk` in headless Chromium,
//!   on a page served from another origin with a client-side key: the demo
//!   flags visible to clients shown, a hidden one `FLAG_NOT_FOUND` and
//!   never in any answer, a `flagctl flag off` reaching the open page (SSE
//!   event, re-fetch), a flag hidden from clients leaving it, a refused
//!   origin and a revoked key shown nothing;
//! - the Node and the Python server providers with an SDK key: every value
//!   type by the single-flag endpoint, `FLAG_NOT_FOUND`, a type mismatch,
//!   and the pause after a `429` (`Retry-After`), then the way back.
//!
//! Without node, npm, Chromium or python3 the test fails, never skips
//! (`tests/run` installs them).

use std::path::{Path, PathBuf};
use std::process::Command;

use flagstream_tests::python;
use flagstream_tests::relay::Relay;
use serde_json::{Value as Json, json};

use crate::toolchain::{repo, run};

fn clients_dir() -> PathBuf {
    repo().join("tests/ofrep-clients")
}

/// The last stdout line of a script's run, as JSON.
fn json_out(what: &str, cmd: &mut Command) -> Json {
    let out = run(what, cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // No output at all is "" here, and fails the parse with the output shown.
    let last = stdout.lines().last().unwrap_or("");
    let v: Json = serde_json::from_str(last)
        .unwrap_or_else(|e| panic!("{what}: the output is not JSON ({e}): {stdout}"));
    println!("{what}: {v:#}");
    v
}

/// `flagctl ... -o json` as JSON.
fn ctl_json(relay: &Relay, args: &[&str]) -> Json {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&relay.flagctl("demo", &all)).expect("flagctl prints JSON")
}

/// What a server provider evaluated (`server.mjs`, `server.py`): the
/// relay's values, reasons and variants, its errors, and the pause.
fn check_server_provider(who: &str, out: &Json) {
    let item = |name: &str| &out[name];
    assert_eq!(item("bool")["value"], true, "{who}: user-1 is a beta tester: {out}");
    assert_eq!(item("bool")["reason"], "TARGETING_MATCH", "{who}");
    assert_eq!(item("string")["value"], "dark", "{who}: user-42 is targeted");
    assert_eq!(item("string")["variant"], "1", "{who}");
    assert_eq!(item("int")["value"], 100, "{who}: plan pro");
    assert_eq!(item("float")["value"].as_f64(), Some(0.25), "{who}");
    assert_eq!(item("float")["reason"], "DEFAULT", "{who}");
    assert_eq!(item("object")["value"], json!({"model": "bm25"}), "{who}: off serves variation 0");
    assert_eq!(item("object")["reason"], "DISABLED", "{who}");
    assert_eq!(item("missing")["errorCode"], "FLAG_NOT_FOUND", "{who}");
    assert_eq!(item("missing")["value"], true, "{who}: the caller's default");
    assert_eq!(item("mismatch")["errorCode"], "TYPE_MISMATCH", "{who}");
    // The limited relay allows 1/s with a burst of 2: then a 429, and the
    // provider stops asking until Retry-After.
    let limited = out["limited"].as_array().expect("the limited evaluations");
    let served = limited.iter().take_while(|d| d["errorCode"].is_null()).count();
    assert!(served >= 1, "{who}: the first evaluation is served: {out}");
    let paused: Vec<&Json> = limited.iter().skip(served).collect();
    assert!(!paused.is_empty(), "{who}: the rate limit was reached: {out}");
    for p in &paused {
        assert_eq!(p["errorCode"], "GENERAL", "{who}: {p}");
        assert_eq!(p["value"], "fallback", "{who}");
    }
    assert!(
        paused.iter().skip(1).all(|p| p["message"].as_str().unwrap_or("").contains("TooManyRequests")),
        "{who}: evaluations after the 429 pause without asking: {out}"
    );
    assert_eq!(out["resumed"], true, "{who}: served again after Retry-After");
}

#[tokio::test]
async fn openfeature_ofrep_providers_against_a_relay() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let chromium = std::env::var("FLAGSTREAM_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: the OFREP web provider test needs Chromium (apt-get install chromium, or set FLAGSTREAM_CHROMIUM)"
    );
    run(
        "npm ci (tests/ofrep-clients)",
        Command::new("npm").args(["ci", "--no-audit", "--no-fund"]).current_dir(clients_dir()),
    );
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(
        &dir.path().join("main"),
        &["--ofrep-listen", "127.0.0.1:0", "--ofrep-event-spread", "100ms"],
    )
    .await;
    let limited = Relay::start(
        &dir.path().join("limited"),
        &["--ofrep-listen", "127.0.0.1:0", "--ofrep-requests-per-sec-per-key", "1"],
    )
    .await;
    let ofrep = |r: &Relay| format!("http://{}", r.ofrep.expect("the relay names its OFREP address"));
    relay.flagctl(
        "demo",
        &["flag", "create", "ratio", "--type", "float", "--variations", "0.25,1", "--on", "--yes"],
    );
    let client_key = ctl_json(&relay, &["key", "create", "--client", "--name", "browser"]);

    // The browser.
    let web = json_out(
        "node web.mjs (headless Chromium)",
        Command::new("node")
            .arg("web.mjs")
            .arg(
                json!({
                    "ofrep": ofrep(&relay),
                    "relay": relay.url(),
                    "token": relay.admin_token(),
                    "flagctl": env!("CARGO_BIN_EXE_flagctl"),
                    "client_key": client_key["secret"],
                })
                .to_string(),
            )
            .current_dir(clients_dir())
            .env("FLAGSTREAM_CHROMIUM", &chromium),
    );
    assert_eq!(web["page_errors"], json!([]), "{web}");
    let initial = &web["initial"];
    assert_eq!(initial["ready"], true, "{initial}");
    assert_eq!(initial["values"]["theme"], "system", "{initial}");
    assert_eq!(initial["values"]["beta-banner"], false);
    assert_eq!(initial["values"]["max-upload-mb"], 10);
    assert_eq!(initial["details"]["theme"]["reason"], "DEFAULT");
    // Not visible to clients: what a missing flag gives, and never sent.
    assert_eq!(initial["details"]["new-checkout"]["errorCode"], "FLAG_NOT_FOUND", "{initial}");
    let shown = web["shown_text"].as_str().unwrap();
    assert!(shown.contains("theme: \"system\"") && shown.contains("max-upload-mb: 10"), "{shown}");
    let bodies = web["ofrep_bodies"].as_array().unwrap();
    assert!(!bodies.is_empty(), "the page's OFREP answers were seen");
    for hidden in ["new-checkout", "search-ranking", "ratio", "us-enterprise", "beta-testers"] {
        assert!(
            bodies.iter().all(|b| !b.as_str().unwrap_or("").contains(hidden)),
            "{hidden} reached the browser"
        );
    }
    // The change reached the open page (how long it took is printed
    // above; docs/BENCHMARKS.md has the measured times).
    let after = &web["after_change"];
    assert_eq!(after["values"]["theme"], "light", "{after}");
    assert_eq!(after["details"]["max-upload-mb"]["errorCode"], "FLAG_NOT_FOUND", "{after}");
    assert!(after["changes"].as_u64().unwrap() >= 2, "each change came as a configuration change: {after}");
    // A page from an origin the environment does not list gets nothing.
    let refused = &web["refused_origin"];
    assert_eq!(refused["ready"], false, "{refused}");
    assert!(refused["error"].is_string(), "{refused}");
    assert!(relay.metric("flagstream_limit_hits_total{limit=\"ofrep_origin\"}").await >= 1.0);
    // A revoked key gets nothing either.
    let revoked = &web["revoked_key"];
    assert_eq!(revoked["ready"], false, "{revoked}");
    assert!(revoked["error"].is_string(), "{revoked}");
    assert!(relay.metric("flagstream_ofrep_requests_total{endpoint=\"bulk\",status=\"401\"}").await >= 1.0);
    println!("the change reached the page in {} ms", web["change_ms"]);

    // The server providers (theme back on, as the demo has it).
    relay.flagctl("demo", &["flag", "on", "theme", "--yes"]);
    // Each provider with its own key at the limited relay (the rate is per
    // key).
    let server_cfg = |limited_key: Json| {
        json!({
            "ofrep": ofrep(&relay),
            "key": relay.demo_key(),
            "limited_ofrep": ofrep(&limited),
            "limited_key": limited_key,
        })
        .to_string()
    };
    let node = json_out(
        "node server.mjs (@openfeature/ofrep-provider)",
        Command::new("node")
            .arg("server.mjs")
            .arg(server_cfg(json!(limited.demo_key())))
            .current_dir(clients_dir()),
    );
    check_server_provider("node", &node);
    let packages = python::packages(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("ofrep-python"),
        &["openfeature-sdk==0.10.0", "openfeature-provider-ofrep==0.3.0"],
        &["openfeature.contrib.provider.ofrep"],
    );
    let py = json_out(
        "python3 server.py (openfeature-provider-ofrep)",
        Command::new("python3")
            .arg("server.py")
            .arg(server_cfg(ctl_json(&limited, &["key", "create", "--name", "python"])["secret"].clone()))
            .current_dir(clients_dir())
            .env("PYTHONPATH", &packages),
    );
    check_server_provider("python", &py);
    assert!(
        limited.metric("flagstream_ofrep_requests_total{endpoint=\"single\",status=\"429\"}").await >= 2.0
    );
}
