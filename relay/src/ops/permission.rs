//! Owner-only files: the data directory and the sled store's directory are
//! made mode 0700 and the files the store wrote 0600, so other users of
//! the host read neither flags, audit records, token hashes nor the admin
//! token. Secrets themselves are written 0600 by `secret::write_private`.
//!
//! sled creates its files itself, with the process's umask (often 0644),
//! and more of them later (snapshots, blobs). Not umask: that is
//! process-wide, and the relay is also a library. Instead its directory is
//! 0700 before sled opens it (a file in it is then out of other users'
//! reach whatever its own mode), and the files are set 0600 after opening
//! and again at shutdown.

use std::path::Path;

/// Creates `dir` (and missing parents) mode 0700. An existing directory
/// is left as the operator made it, with a warning when other users can
/// enter it.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if dir.is_dir() {
            let mode = std::fs::metadata(dir)?.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(dir = %dir.display(), mode = %format!("{mode:04o}"), "the data directory is open to other users of this host (its files are 0600, yet names and sizes show); chmod 700 it");
            }
            return Ok(());
        }
        std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}

/// Makes `dir`, which the relay owns whole (the sled store), 0700 and
/// everything in it owner-only (directories 0700, files 0600); creates it
/// if missing. The SDK's cache needs the same: one implementation, the
/// SDK's.
pub(crate) fn make_private(dir: &Path) -> std::io::Result<()> {
    flagstream::make_private(dir)
}
