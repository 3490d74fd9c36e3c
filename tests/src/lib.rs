//! Shared fixtures for flagstream's integration tests: the data-driven
//! evaluation case format (`case`), a real relay process (`relay`) and a
//! raw protocol subscriber (`subscriber`), a TCP fault proxy (`proxy`), and
//! the pinned Python packages some tests run (`python`).

pub mod case;
pub mod cluster;
pub mod fault;
pub mod inbound;
pub mod ofrep;
pub mod postgres;
pub mod proxy;
pub mod python;
pub mod relay;
pub mod subscriber;

/// A generous timeout for one step of a test on a busy 2-core machine.
pub const STEP: std::time::Duration = std::time::Duration::from_secs(20);

/// Copies the directory `from` to `to`, recursively (a backup or restore
/// of a data directory, as an operator would make it).
pub fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Runs a test alone in its test binary while the guard is held: for the
/// binaries (`fault`, `bindings`) whose tests assert what a load elsewhere
/// could change (stall detection counts, the bindings' own relay suites).
/// A test that failed while holding it does not fail the next ones.
pub fn serial() -> Serial {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    Serial(SERIAL.lock().unwrap_or_else(|poisoned| poisoned.into_inner()))
}

/// The guard [`serial`] returns: held for a whole test, across its awaits
/// (a test's runtime runs nothing else that could want it).
#[derive(Debug)]
pub struct Serial(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);
