//! `flagctl`, the real binary, against a real relay: every command's happy
//! path; bad input gives a clear message, a documented non-zero exit code,
//! and changes nothing; export then apply reproduces an environment.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use flagstream_tests::STEP;
use flagstream_tests::relay::Relay;
use flagstream_tests::subscriber::Subscriber;

fn flagctl_binary() -> PathBuf {
    flagstream_tests::relay::relay_binary().with_file_name(format!("flagctl{}", std::env::consts::EXE_SUFFIX))
}

struct Ctl {
    relay: String,
    token: String,
}

impl Ctl {
    fn new(relay: &Relay) -> Ctl {
        Ctl { relay: relay.url(), token: relay.admin_token() }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(flagctl_binary())
            .args(["--relay", &self.relay, "--token", &self.token, "--config", "/nonexistent/flagctl.toml"])
            .args(args)
            // The environment every command here acts on unless it names
            // another with -e (there is no built-in default).
            .env("FLAGSTREAM_ENV", "demo")
            .output()
            .expect("flagctl runs")
    }

    /// Runs, asserts success, returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "flagctl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs, asserts the exit code, returns stderr.
    fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(code), "flagctl {args:?}: {stderr}");
        stderr
    }
}

/// The flag lifecycle from the terminal.
#[tokio::test]
async fn flag_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    let list = ctl.ok(&["flag", "list"]);
    assert!(list.contains("new-checkout") && list.contains("KEY"), "{list}");

    ctl.ok(&["flag", "create", "launch", "--description", "Launch it", "--yes"]);
    let got: serde_json::Value =
        serde_json::from_str(&ctl.ok(&["flag", "get", "launch", "-o", "json"])).unwrap();
    assert_eq!((got["on"].as_bool(), got["off_variation"].as_u64()), (Some(false), Some(1)));
    ctl.ok(&["flag", "on", "launch", "--yes", "--comment", "ship it"]);
    ctl.ok(&["flag", "rollout", "launch", "true=10", "false=90", "--yes"]);
    ctl.ok(&["flag", "target", "launch", "--variation", "true", "--add", "alice,bob", "--yes"]);
    let eval = ctl.ok(&["eval", "launch", "--key", "alice"]);
    assert!(eval.contains("TARGET_MATCH") && eval.contains("value      true"), "{eval}");
    let eval = ctl.ok(&[
        "eval",
        "new-checkout",
        "--key",
        "u",
        "--attr",
        "country=US",
        "--attr",
        "plan=enterprise",
        "-o",
        "json",
    ]);
    assert!(eval.contains("\"RULE_MATCH\""), "{eval}");
    ctl.ok(&[
        "flag",
        "rule",
        "add",
        "launch",
        "--id",
        "ops",
        "--clause",
        "team in ops,sre",
        "--clause",
        "!age lt 18",
        "--serve",
        "true",
        "--position",
        "0",
        "--yes",
    ]);
    let eval = ctl.ok(&["eval", "launch", "--key", "carol", "--attr", "team=sre", "--attr", "age=40"]);
    assert!(eval.contains("RULE_MATCH (rule 0 \"ops\")"), "{eval}");
    let e = ctl.fails(
        &[
            "flag",
            "rule",
            "add",
            "launch",
            "--id",
            "x",
            "--clause",
            "team inn ops",
            "--serve",
            "true",
            "--yes",
        ],
        5,
    );
    assert!(e.contains("unknown operator \"inn\""), "{e}");
    ctl.ok(&["flag", "rule", "remove", "launch", "--id", "ops", "--yes"]);
    ctl.fails(&["flag", "rule", "remove", "launch", "--id", "ops", "--yes"], 4);
    let history = ctl.ok(&["flag", "history", "launch"]);
    assert!(
        history.contains("ship it") && history.contains("3 -> 4") && history.contains("create"),
        "{history}"
    );
    ctl.ok(&["flag", "off", "launch", "--yes"]);
    ctl.ok(&["flag", "delete", "launch", "--yes"]);
    ctl.fails(&["flag", "get", "launch"], 4);
    let status = ctl.ok(&["status"]);
    assert!(status.contains("primary") && status.contains("demo"), "{status}");
}

/// `--wait` reports propagation to live subscribers.
#[tokio::test]
async fn wait_reports_propagation() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut sub = Subscriber::connect(relay.channel().await, &relay.demo_key(), None).await.unwrap();
    sub.next(STEP).await.unwrap();
    let ctl = Ctl::new(&relay);
    let head = sub.cursor().1;
    let reader = tokio::spawn(async move {
        // Reads (and acks) until the write arrives: a periodic heartbeat
        // may come first.
        sub.wait_revision(head + 1, STEP).await.unwrap();
        sub
    });
    let out = tokio::task::spawn_blocking(move || {
        ctl.ok(&["flag", "on", "search-ranking", "--yes", "--wait", "--wait-timeout", "10s"])
    })
    .await
    .unwrap();
    assert!(out.contains("reached 1 of 1 subscribers"), "{out}");
    reader.await.unwrap();
}

/// Bad input: clear message, documented exit code, store unchanged.
#[tokio::test]
async fn bad_input_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    let before = ctl.ok(&["export"]);

    let e = ctl.fails(&["flag", "on", "no-such-flag", "--yes"], 4);
    assert!(e.contains("flag \"no-such-flag\" not found"), "{e}");
    let e = ctl.fails(&["flag", "create", "new-checkout", "--yes"], 3);
    assert!(e.contains("expected version 0, but it is at version 1"), "{e}");
    let e = ctl.fails(&["flag", "rollout", "new-checkout", "true=10", "false=80", "--yes"], 5);
    assert!(e.contains("weights sum to 90%"), "{e}");

    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "key: new-checkout\ntype: bool\nvariations: [true, false]\non: true\noff_variation: 1\nrules:\n  - clauses: [{attribute: a, op: inn, values: [x]}]\n    serve: {variation: 0}\nfallthrough: {variation: 0}\n").unwrap();
    let e = ctl.fails(&["flag", "set", "new-checkout", "-f", bad.to_str().unwrap(), "--yes"], 5);
    assert!(e.contains("unknown variant `inn`"), "{e}");
    std::fs::write(&bad, "key: new-checkout\ntype: bool\nvariations: [true, false]\non: true\noff_variation: 7\nfallthrough: {variation: 0}\n").unwrap();
    let e = ctl.fails(&["flag", "set", "new-checkout", "-f", bad.to_str().unwrap(), "--yes"], 5);
    assert!(e.contains(r#"flags["new-checkout"].off_variation: variation index 7 out of range"#), "{e}");
    std::fs::write(&bad, "flags: [ {key: x").unwrap();
    let e = ctl.fails(&["apply", "-f", bad.to_str().unwrap(), "--yes"], 5);
    assert!(e.contains("bad.yaml"), "{e}");

    // Writes on a non-terminal need --yes.
    let e = ctl.fails(&["flag", "off", "new-checkout"], 8);
    assert!(e.contains("--yes"), "{e}");

    let wrong = Ctl { relay: ctl.relay.clone(), token: "fs_admin_wrong".into() };
    let e = wrong.fails(&["flag", "list"], 7);
    assert!(e.contains("admin token"), "{e}");

    assert_eq!(ctl.ok(&["export"]), before, "a refused command changed the store");
}

/// A relay that is down fails within the connect timeout, never hangs.
#[test]
fn relay_down_fails_fast() {
    let ctl = Ctl { relay: "http://127.0.0.1:9".into(), token: "t".into() };
    let started = Instant::now();
    let e = ctl.fails(&["flag", "list", "--connect-timeout", "1s"], 1);
    assert!(e.contains("cannot reach relay") || e.contains("did not answer"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

/// `export | apply` to a fresh environment reproduces it exactly; a second
/// apply is a no-op; `--prune` deletes what the files no longer hold.
#[tokio::test]
async fn export_apply_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    let exported = ctl.ok(&["export"]);
    let file = dir.path().join("demo.yaml");
    std::fs::write(&file, &exported).unwrap();
    ctl.ok(&["env", "create", "copy"]);
    let applied = ctl.ok(&["apply", "-f", file.to_str().unwrap(), "-e", "copy", "--yes"]);
    assert!(applied.contains("revision 1"), "{applied}");
    assert_eq!(ctl.ok(&["export", "-e", "copy"]), exported);
    let again = ctl.ok(&["apply", "-f", file.to_str().unwrap(), "-e", "copy", "--yes"]);
    assert!(again.contains("up to date"), "{again}");
    ctl.ok(&["flag", "create", "extra", "-e", "copy", "--yes"]);
    ctl.ok(&["apply", "-f", file.to_str().unwrap(), "-e", "copy", "--prune", "--yes"]);
    assert_eq!(ctl.ok(&["export", "-e", "copy"]), exported, "prune removed the extra flag");
    let envs = ctl.ok(&["env", "list", "-o", "json"]);
    assert!(envs.contains("\"copy\""), "{envs}");
    ctl.ok(&["env", "delete", "copy", "--yes"]);
}

/// docs/CLI.md is generated from the clap definitions and kept in sync.
#[test]
fn cli_reference_is_current() {
    let out = Command::new(flagctl_binary()).arg("markdown").output().unwrap();
    let generated = String::from_utf8(out.stdout).unwrap();
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CLI.md")).unwrap();
    assert!(
        doc.starts_with(&generated),
        "docs/CLI.md is out of date: regenerate its first part with `flagctl markdown` (keep the hand-written tail)"
    );
}

/// `apply` of a partial file is validated against the whole environment it
/// would produce (a reference to a segment only the relay has is fine);
/// a key twice in the files is named.
#[tokio::test]
async fn apply_validates_the_resulting_environment() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    let part = dir.path().join("part.yaml");
    std::fs::write(
        &part,
        "flags:\n  - key: beta-only\n    type: bool\n    variations: [true, false]\n    on: true\n    off_variation: 1\n    rules:\n      - {clauses: [{attribute: key, op: segment_match, values: [beta-testers]}], serve: {variation: 0}}\n    fallthrough: {variation: 1}\n",
    )
    .unwrap();
    let out = ctl.ok(&["apply", "-f", part.to_str().unwrap(), "--yes"]);
    assert!(out.contains("applied to demo"), "{out}");
    let eval = ctl.ok(&["eval", "beta-only", "--key", "user-1"]);
    assert!(eval.contains("RULE_MATCH"), "{eval}");

    let dup = dir.path().join("dups");
    std::fs::create_dir(&dup).unwrap();
    for name in ["a.yaml", "b.yaml"] {
        std::fs::write(dup.join(name), std::fs::read_to_string(&part).unwrap()).unwrap();
    }
    let e = ctl.fails(&["apply", "-f", dup.to_str().unwrap(), "--yes"], 5);
    assert!(e.contains("flag \"beta-only\" appears twice"), "{e}");
}

/// `flag ramp`: a ramp whose start is in the past serves its current step
/// (the reason names it), `flag get` shows the current and next step, a
/// pause drops the steps to come, a rollback serves `otherwise` to
/// everyone; a ramp that goes down is refused and changes nothing.
#[tokio::test]
async fn ramps_are_created_paused_and_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    ctl.ok(&["flag", "create", "ramped", "--on", "--yes"]);
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let start = chrono::DateTime::from_timestamp_millis(now - 2 * 3_600_000).unwrap().to_rfc3339();
    ctl.ok(&["flag", "ramp", "ramped", "--steps", "0%,100%@1h,100%@1d", "--start", &start, "--yes"]);
    let eval = ctl.ok(&["eval", "ramped", "--key", "anyone"]);
    assert!(eval.contains("value      true") && eval.contains("(ramp step 2)"), "{eval}");
    let get = ctl.ok(&["flag", "get", "ramped"]);
    assert!(get.contains("# fallthrough: ramp of true at step 2 of 3: 100% since"), "{get}");
    assert!(get.contains("; next: 100% at "), "{get}");

    let version = |ctl: &Ctl| {
        let got: serde_json::Value =
            serde_json::from_str(&ctl.ok(&["flag", "get", "ramped", "-o", "json"])).unwrap();
        got["version"].as_u64().unwrap()
    };
    let v = version(&ctl);
    let err = ctl.fails(&["flag", "ramp", "ramped", "--steps", "50%,10%@1h", "--yes"], 5);
    assert!(err.contains("may not go down"), "{err}");
    let err = ctl.fails(
        &["flag", "ramp", "ramped", "--steps", "50%", "--variation", "true", "--otherwise", "true", "--yes"],
        5,
    );
    assert!(err.contains("the same variation"), "{err}");
    let err = ctl.fails(&["flag", "ramp", "ramped", "--steps", "50%", "--rule", "#3", "--yes"], 5);
    assert!(err.contains("has 0 rules"), "{err}");
    assert_eq!(version(&ctl), v, "a refused ramp wrote nothing");

    ctl.ok(&["flag", "ramp", "ramped", "--pause", "--yes"]);
    let get = ctl.ok(&["flag", "get", "ramped"]);
    assert!(get.contains("at step 2 of 2: 100% since") && get.contains("; no further step"), "{get}");

    ctl.ok(&["flag", "ramp", "ramped", "--rollback", "--yes"]);
    let eval = ctl.ok(&["eval", "ramped", "--key", "anyone"]);
    assert!(eval.contains("value      false") && !eval.contains("ramp step"), "{eval}");
    assert!(!ctl.ok(&["flag", "get", "ramped"]).contains("# fallthrough"));
    let err = ctl.fails(&["flag", "ramp", "ramped", "--pause", "--yes"], 5);
    assert!(err.contains("serves no ramp"), "{err}");
}

/// `watch` takes the SDK key from a file (a key on the command line is
/// visible in the process list); a missing or empty file is a usage error
/// naming it.
#[tokio::test]
async fn watch_reads_the_sdk_key_from_a_file() {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let ctl = Ctl::new(&relay);
    let key_file = relay.data_dir.join("demo-sdk-key");
    let mut watcher = tokio::process::Command::new(flagctl_binary())
        .args(["--relay", &relay.url(), "--config", "/nonexistent/flagctl.toml", "watch", "--sdk-key-file"])
        .arg(&key_file)
        .args(["--count", "1"])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(watcher.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(STEP, lines.next_line()).await.expect("watching").unwrap().unwrap();
    assert!(first.starts_with("watching "), "{first}");
    ctl.ok(&["flag", "off", "new-checkout", "--yes"]);
    let change = tokio::time::timeout(STEP, lines.next_line()).await.expect("the change").unwrap().unwrap();
    assert!(change.contains("new-checkout") && change.ends_with("off"), "{change}");
    let status = tokio::time::timeout(STEP, watcher.wait()).await.expect("exits after --count 1").unwrap();
    assert!(status.success());
    let err = ctl.fails(&["watch", "--sdk-key-file", "/nonexistent/key"], 2);
    assert!(err.contains("--sdk-key-file /nonexistent/key"), "{err}");
    let empty = dir.path().join("empty-key");
    std::fs::write(&empty, "\n").unwrap();
    let err = ctl.fails(&["watch", "--sdk-key-file", empty.to_str().unwrap()], 2);
    assert!(err.contains("the file is empty"), "{err}");
}
