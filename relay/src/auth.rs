//! Secrets (SDK keys, admin tokens) and the admin interceptor. Secrets are
//! random, shown once, and stored only as SHA-256 hashes; comparisons are
//! constant-time. Which token may do what is `access.rs`.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use rand::RngCore;
use sha2::{Digest, Sha256};
use tonic::{Request, Status};

use crate::access::Tokens;

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

/// The admin API's gatekeeper: requires `authorization: Bearer <token>`
/// of a known token and hands the methods its
/// [`Principal`](crate::access::Principal).
#[derive(Clone, Debug)]
pub(crate) struct AdminAuth {
    /// The token registry.
    pub tokens: Arc<Tokens>,
}

impl tonic::service::Interceptor for AdminAuth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let token = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("admin token required: send `authorization: Bearer <token>`")
            })?;
        let principal = self
            .tokens
            .authenticate(token.trim())
            .ok_or_else(|| Status::unauthenticated("admin token is not valid"))?;
        req.extensions_mut().insert(principal);
        Ok(req)
    }
}
