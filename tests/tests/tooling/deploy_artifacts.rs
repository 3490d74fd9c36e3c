//! The deploy/ artifacts work with this build: every relay command line in
//! the Dockerfile, docker-compose.yml, the Kubernetes manifests and the
//! systemd units, with every configuration file they use, is accepted by
//! the relay binary (`flagstream-relay check`, or the probe's parser); and
//! the Kubernetes manifests validate against Kubernetes' own schemas
//! (offline, with the `kubernetes-validate` package: from
//! `FLAGSTREAM_PYTHON_PACKAGES`, or downloaded from PyPI into the build
//! directory on first run, see `flagstream_tests::python`).

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser;
use flagstream_tests::relay::relay_binary;

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// One relay command line and where it comes from.
#[derive(Debug)]
struct Line {
    from: String,
    args: Vec<String>,
}

fn strings(v: &serde_yaml_ng::Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| s.iter().filter_map(|x| x.as_str().map(str::to_owned)).collect())
        .unwrap_or_default()
}

/// Every command line of the relay binary in the deploy artifacts, and
/// the configuration files (path inside the container or host → content).
fn lines_and_configs() -> (Vec<Line>, Vec<(String, String)>) {
    let mut lines = Vec::new();
    let mut configs = Vec::new();
    for name in ["primary.toml", "replica.toml"] {
        let text = read(&deploy().join("config").join(name));
        configs.push((format!("/etc/flagstream/{name}"), text));
    }

    // Dockerfile: CMD and the HEALTHCHECK's command (JSON arrays).
    let dockerfile = read(&deploy().join("Dockerfile"));
    let mut entry = Vec::new();
    for l in dockerfile.lines() {
        let l = l.trim();
        if let Some(rest) = l.strip_prefix("ENTRYPOINT ") {
            entry = serde_json::from_str::<Vec<String>>(rest).expect("ENTRYPOINT is a JSON array");
        }
        if let Some(rest) = l.strip_prefix("CMD ") {
            let cmd: Vec<String> = serde_json::from_str(rest).expect("CMD is a JSON array");
            let mut args = entry.clone();
            args.extend(cmd);
            lines.push(Line { from: "Dockerfile CMD".into(), args });
        }
    }
    let joined = dockerfile.replace("\\\n", " ");
    let hc = joined.lines().find(|l| l.starts_with("HEALTHCHECK")).expect("a HEALTHCHECK");
    let cmd = &hc[hc.find("CMD ").expect("HEALTHCHECK CMD") + 4..];
    lines.push(Line {
        from: "Dockerfile HEALTHCHECK".into(),
        args: serde_json::from_str(cmd.trim()).unwrap(),
    });
    assert_eq!(entry, vec!["flagstream-relay"], "the image's entrypoint is the relay");

    // docker-compose.yml: relay services' commands and health checks.
    let mut compose: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read(&deploy().join("docker-compose.yml"))).unwrap();
    compose.apply_merge().unwrap();
    for (name, svc) in compose["services"].as_mapping().unwrap() {
        let name = name.as_str().unwrap();
        if svc["image"].as_str() == Some("flagstream-relay:dev") && !svc["command"].is_null() {
            let mut args = vec!["flagstream-relay".to_owned()];
            args.extend(strings(&svc["command"]));
            lines.push(Line { from: format!("compose {name} command"), args });
        }
        let test = strings(&svc["healthcheck"]["test"]);
        if test.first().map(String::as_str) == Some("CMD") {
            lines.push(Line { from: format!("compose {name} healthcheck"), args: test[1..].to_vec() });
        }
    }

    // Kubernetes: container args, probe commands, and the ConfigMap.
    for entry in std::fs::read_dir(deploy().join("k8s")).unwrap() {
        let path = entry.unwrap().path();
        let text = read(&path);
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = serde_yaml_ng::Value::deserialize(doc).unwrap();
            if v["kind"] == "ConfigMap" {
                for (k, val) in v["data"].as_mapping().unwrap() {
                    configs.push((
                        format!("/etc/flagstream/config/{}", k.as_str().unwrap()),
                        val.as_str().unwrap().to_owned(),
                    ));
                }
            }
            for c in v["spec"]["template"]["spec"]["containers"].as_sequence().into_iter().flatten() {
                let from = format!(
                    "{} {}",
                    path.file_name().unwrap().to_string_lossy(),
                    v["metadata"]["name"].as_str().unwrap()
                );
                let mut args = vec!["flagstream-relay".to_owned()];
                args.extend(strings(&c["args"]));
                lines.push(Line { from: format!("{from} args"), args });
                for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
                    let cmd = strings(&c[probe]["exec"]["command"]);
                    assert!(!cmd.is_empty(), "{from}: a {probe} that runs the relay's probe");
                    lines.push(Line { from: format!("{from} {probe}"), args: cmd });
                }
            }
        }
    }

    // systemd units.
    for entry in std::fs::read_dir(deploy().join("systemd")).unwrap() {
        let path = entry.unwrap().path();
        for l in read(&path).lines() {
            if let Some(cmd) = l.strip_prefix("ExecStart=").or_else(|| l.strip_prefix("ExecStartPre=")) {
                let mut args: Vec<String> = cmd.split_whitespace().map(str::to_owned).collect();
                args[0] = "flagstream-relay".into();
                lines.push(Line { from: format!("{} {l}", path.display()), args });
            }
        }
    }
    (lines, configs)
}

use serde::Deserialize;

/// Every `serve` or `check` line passes `flagstream-relay check` with its
/// configuration file (paths under a stand-in root holding stand-in TLS
/// files and token); every probe line parses.
#[test]
fn every_command_line_and_config_file_is_accepted_by_the_binary() {
    let (lines, configs) = lines_and_configs();
    assert!(lines.len() >= 12, "found only {lines:?}");
    let root = tempfile::tempdir().unwrap();
    let here = |p: &str| root.path().join(p.trim_start_matches('/'));
    let prefix = format!("{}/etc/flagstream/", root.path().display());
    for f in ["tls/tls.crt", "tls/tls.key", "tls/ca.crt", "replicate-token/token"] {
        let p = here(&format!("/etc/flagstream/{f}"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, "stand-in").unwrap();
    }
    for (path, text) in &configs {
        let p = here(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text.replace("/etc/flagstream/", &prefix)).unwrap();
    }
    let mut checked = 0;
    for line in &lines {
        assert_eq!(line.args[0], "flagstream-relay", "{line:?}");
        let args: Vec<String> =
            line.args[1..].iter().map(|a| a.replace("/etc/flagstream/", &prefix)).collect();
        match args.first().map(String::as_str) {
            Some("serve" | "check") => {
                let mut cmd = Command::new(relay_binary());
                cmd.arg("check").args(&args[1..]);
                let out = cmd.output().unwrap();
                assert!(
                    out.status.success(),
                    "{}: {:?} refused: {}",
                    line.from,
                    line.args,
                    String::from_utf8_lossy(&out.stderr)
                );
                let said = String::from_utf8_lossy(&out.stdout);
                assert!(said.starts_with("configuration ok"), "{said}");
                checked += 1;
            }
            Some("probe") => {
                flagstream_relay::config::Cli::try_parse_from(&line.args)
                    .unwrap_or_else(|e| panic!("{}: {:?}: {e}", line.from, line.args));
            }
            other => panic!("{}: unexpected relay command {other:?}", line.from),
        }
    }
    assert!(checked >= 6, "only {checked} serve lines checked");
    // The replica configurations are replicas and the primaries primaries.
    let role = |cfg: &str| {
        let out = Command::new(relay_binary()).args(["check", "--config"]).arg(here(cfg)).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(role("/etc/flagstream/replica.toml").contains("replica"));
    assert!(role("/etc/flagstream/config/replica.toml").contains("replica"));
    assert!(role("/etc/flagstream/primary.toml").contains("primary"));
}

/// The manifests validate (strictly: no unknown fields) against the
/// Kubernetes schemas shipped by the `kubernetes-validate` package (from
/// `FLAGSTREAM_PYTHON_PACKAGES`, or installed from PyPI into the build
/// directory on first run, saying so).
#[test]
fn kubernetes_manifests_validate_against_the_schemas() {
    let target = flagstream_tests::python::packages(
        &Path::new(env!("CARGO_TARGET_TMPDIR")).join("kubernetes-validate"),
        &["kubernetes-validate==1.37.0"],
        &["kubernetes_validate"],
    );
    let files: Vec<PathBuf> =
        std::fs::read_dir(deploy().join("k8s")).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(files.len() >= 4);
    let out = Command::new("python3")
        .env("PYTHONPATH", &target)
        .args(["-m", "kubernetes_validate", "--strict", "--kubernetes-version", "1.30.0"])
        .args(&files)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}{}", String::from_utf8_lossy(&out.stderr));
    for kind in [
        "statefulset",
        "deployment",
        "service",
        "poddisruptionbudget",
        "horizontalpodautoscaler",
        "configmap",
    ] {
        assert!(said.contains(&format!("passed for resource {kind}/")), "{kind} not validated: {said}");
    }
}
