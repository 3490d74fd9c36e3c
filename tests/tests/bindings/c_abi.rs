//! The C ABI (`sdk/ffi`) as a C program uses it: the static library built
//! with cargo, `sdk/ffi/tests/c/smoke.c` compiled against the checked-in
//! header with the machine's C compiler (`cc`) and run against a real
//! relay: the ABI version, an unknown option refused by name, first data,
//! a kept context, a rule match with its rule id, a string target, int,
//! number and JSON flags, flag handles (bool, string), a multi-kind
//! context from JSON, a list attribute, an evaluation at a given time, the
//! status and stats, a missing flag and a wrong type, a fork (the child
//! serves the parent's flags marked stale, then its own sync's), a change
//! listener called on a library thread with the flag this test writes, a
//! null handle and a use after close answered with an error code and a
//! message instead of a crash.
//!
//! Without a C compiler the test fails, saying what to install.

use std::path::Path;
use std::process::Command;

use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use tokio::io::AsyncBufReadExt;

use crate::toolchain::{ffi_static_library, repo, run};

#[tokio::test]
async fn a_c_program_uses_the_whole_slice_of_the_abi_against_a_relay() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let version = Command::new(&cc).arg("--version").output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "`{cc} --version` failed: the C ABI test needs a C compiler (Debian: apt-get install gcc)"
    );
    let lib_dir = ffi_static_library();
    let exe = Path::new(env!("CARGO_TARGET_TMPDIR")).join("flagstream-smoke");
    run(
        "cc smoke.c",
        Command::new(&cc)
            .arg("-Wall")
            .arg("-Werror")
            .arg("-o")
            .arg(&exe)
            .arg(repo().join("sdk/ffi/tests/c/smoke.c"))
            .arg("-I")
            .arg(repo().join("sdk/ffi/include"))
            .arg(lib_dir.join("libflagstream_ffi.a"))
            .args(["-lpthread", "-ldl", "-lm"]),
    );
    let dir = tempfile::tempdir().unwrap();
    let relay = Relay::start(dir.path(), &[]).await;
    let mut program = tokio::process::Command::new(&exe)
        .args([relay.url(), relay.demo_key()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the smoke program starts");
    // Its listener waits for a change: write one when it says it listens.
    let mut lines = tokio::io::BufReader::new(program.stdout.take().expect("stdout")).lines();
    let mut stdout = String::new();
    let listening = tokio::time::timeout(STEP, async {
        while let Some(line) = lines.next_line().await.expect("stdout readable") {
            stdout.push_str(&line);
            stdout.push('\n');
            if line == "listening" {
                return true;
            }
        }
        false
    })
    .await;
    assert!(matches!(listening, Ok(true)), "the program never listened:\n{stdout}");
    put(&mut relay.admin().await, "demo", bool_flag("from-test", true)).await.unwrap();
    while let Some(line) =
        tokio::time::timeout(STEP, lines.next_line()).await.expect("the program goes on").expect("stdout")
    {
        stdout.push_str(&line);
        stdout.push('\n');
    }
    let out = tokio::time::timeout(STEP, program.wait_with_output())
        .await
        .expect("the program ends")
        .expect("its status");
    assert!(
        out.status.success() && stdout.contains("all steps held"),
        "{}\n--- stdout\n{stdout}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.matches("ok  ").count(),
        41,
        "every step ran (the forked child's five among them): {stdout}"
    );
}
