//! Secrets: SDK keys and the admin token. Secrets are random, shown once,
//! and stored only as SHA-256 hashes; comparisons are constant-time.
//! Full tenancy (scopes, rotation, several tokens) comes later; the seams
//! are `hash_secret` and the admin interceptor.

use std::io::Write;
use std::path::{Path, PathBuf};

use rand::RngCore;
use sha2::{Digest, Sha256};
use tonic::{Request, Status};

/// sled key of the admin token's hash in the `meta` tree.
const ADMIN_TOKEN_KEY: &str = "admin_token_sha256";

/// File the first start writes the admin token to (mode 0600).
pub const ADMIN_TOKEN_FILE: &str = "admin-token";

/// A new random secret: `prefix` + 64 hex digits (256 bits).
pub fn new_secret(prefix: &str) -> String {
    let mut b = [0u8; 32];
    rand::rng().fill_bytes(&mut b);
    format!("{prefix}{}", hex::encode(b))
}

/// A new random store epoch (128 bits, hex).
pub fn new_epoch() -> String {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    hex::encode(b)
}

/// SHA-256 of a secret, hex.
pub fn hash_secret(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// Equality that takes the same time wherever the inputs differ.
pub fn constant_time_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Ensures an admin token exists. On first start it creates one, writes it
/// to `dir/admin-token` with mode 0600 and returns that path (to be
/// announced once); afterwards returns `None`. Returns the token's hash.
pub fn ensure_admin_token(db: &sled::Db, dir: &Path) -> std::io::Result<(String, Option<PathBuf>)> {
    let meta = db.open_tree("meta").map_err(std::io::Error::other)?;
    if let Some(h) = meta.get(ADMIN_TOKEN_KEY).map_err(std::io::Error::other)? {
        return Ok((String::from_utf8_lossy(&h).into_owned(), None));
    }
    let token = new_secret("fs_admin_");
    let path = dir.join(ADMIN_TOKEN_FILE);
    write_private(&path, &token)?;
    let hash = hash_secret(&token);
    meta.insert(ADMIN_TOKEN_KEY, hash.as_bytes()).map_err(std::io::Error::other)?;
    db.flush().map_err(std::io::Error::other)?;
    Ok((hash, Some(path)))
}

/// Writes a secret to `path`, readable by the owner only (mode 0600, also
/// when the file already existed), and syncs it.
pub fn write_private(path: &Path, secret: &str) -> std::io::Result<()> {
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

/// The admin API's gatekeeper: requires `authorization: Bearer <token>`.
#[derive(Clone, Debug)]
pub struct AdminAuth {
    /// Hash of the admin token.
    pub token_hash: String,
}

impl tonic::service::Interceptor for AdminAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("admin token required: send `authorization: Bearer <token>`")
            })?;
        if constant_time_eq(&hash_secret(token.trim()), &self.token_hash) {
            Ok(req)
        } else {
            Err(Status::unauthenticated("admin token is not valid"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The token file is created once, private, and its hash persisted.
    #[test]
    fn admin_token_created_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = sled::Config::new().path(dir.path().join("db")).open().unwrap();
        let (h1, path) = ensure_admin_token(&db, dir.path()).unwrap();
        let path = path.expect("created on first start");
        let token = std::fs::read_to_string(&path).unwrap();
        assert_eq!(hash_secret(token.trim()), h1);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let (h2, again) = ensure_admin_token(&db, dir.path()).unwrap();
        assert_eq!((h2, again), (h1, None));
    }
}
