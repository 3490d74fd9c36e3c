//! Directories private to their owner: the SDK's cache directory and the
//! relay's sled store (which uses this function too) are made mode 0700
//! with their files 0600 before anything sensitive is written to them.
//! Needs no cache: the relay uses it whatever the SDK's features.

use std::path::Path;

/// Makes `dir` (created if missing) mode 0700 and everything in it
/// owner-only: directories 0700, files 0600. Shared with the relay, whose
/// sled store needs the same (`flagstream-relay`'s `permission.rs`).
#[doc(hidden)]
pub fn make_private(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
        }
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let kind = entry.file_type()?;
            if kind.is_dir() {
                make_private(&entry.path())?;
            } else if kind.is_file() {
                std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(0o600))?;
            }
        }
        Ok(())
    }
    #[cfg(not(unix))]
    std::fs::create_dir_all(dir)
}
