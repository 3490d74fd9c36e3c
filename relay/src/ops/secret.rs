//! Secrets (SDK keys, admin tokens) and epochs: random, shown once,
//! stored only as SHA-256 hashes, compared in constant time, written to
//! files readable by their owner alone.

use std::io::Write;
use std::path::Path;

use rand::RngCore;
use sha2::{Digest, Sha256};

/// File the first start writes the admin token to (mode 0600).
pub(crate) const ADMIN_TOKEN_FILE: &str = "admin-token";

/// A new random secret: `prefix` + 64 hex digits (256 bits).
pub(crate) fn new_secret(prefix: &str) -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("{prefix}{}", hex::encode(b))
}

/// A new random store epoch (128 bits, hex).
pub(crate) fn new_epoch() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// SHA-256 of a secret, hex.
pub(crate) fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Equality that takes the same time wherever the inputs differ.
pub(crate) fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Writes a secret to `path`, readable by the owner only (mode 0600, also
/// when the file already existed), and syncs it.
pub(crate) fn write_private(path: &Path, secret: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path)?;
    #[cfg(unix)]
    f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    f.write_all(secret.as_bytes())?;
    f.write_all(b"\n")?;
    f.sync_all()
}
