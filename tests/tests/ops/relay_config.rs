//! Bad relay configuration exits with code 64 and one clear line, before
//! binding any port.

use std::process::Command;

/// Each bad option names itself in a single stderr line.
#[test]
fn bad_config_exits_64_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (vec!["--chunk-bytes", "1"], "chunk-bytes: 1 is outside"),
        (vec!["--sled-cache-bytes", "4096"], "sled-cache-bytes: 4096 is below the least, 1048576"),
        (vec!["--heartbeat", "soon"], "heartbeat"),
        (vec!["--log-format", "xml"], "log-format"),
        (vec!["--no-such-option"], "--no-such-option"),
        (vec!["--tls-cert", "/nonexistent/cert.pem"], "tls-cert and tls-key: set both or neither"),
        (
            vec!["--tls-cert", "/nonexistent/c.pem", "--tls-key", "/nonexistent/k.pem"],
            "tls-cert: /nonexistent/c.pem",
        ),
    ] {
        let out = Command::new(flagstream_tests::relay::relay_binary())
            .arg("serve")
            .arg("--data-dir")
            .arg(dir.path())
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    }
}
