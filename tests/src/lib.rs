//! Shared fixtures for flagstream's integration tests: the data-driven
//! evaluation case format (`case`), a real relay process (`relay`) and a
//! raw protocol subscriber (`subscriber`), a TCP fault proxy (`proxy`), and
//! the pinned Python packages some tests run (`python`).

pub mod case;
pub mod cluster;
pub mod fault;
pub mod inbound;
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
