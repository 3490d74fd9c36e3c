//! Admin tokens as the store keeps them: the record (role, environments,
//! the secret's hash) and the one decision every backend makes under its
//! lock when a token is revoked (never the last full admin). Checking what
//! a token may do is `access.rs`, above the store.

use serde::{Deserialize, Serialize};

/// The admin token a primary's first start creates.
pub(crate) const BOOTSTRAP: &str = "bootstrap";

/// What a token may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    /// Read flags, segments, audit, propagation, status; evaluate.
    Read = 1,
    /// Read, and write flags and segments.
    Write = 2,
    /// Everything on its environments (with all environments: also
    /// environments and tokens).
    Admin = 3,
}

impl Role {
    /// Lower-case name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

/// One admin token as stored.
#[derive(Clone, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct TokenRecord {
    /// Unique name; the audit principal.
    pub name: String,
    /// Role.
    pub role: Role,
    /// Environments it may act on; empty: all.
    pub environments: Vec<String>,
    /// May follow every environment as a replica.
    pub replicate: bool,
    /// SHA-256 (hex) of the secret.
    pub hash: String,
    /// Creation time, Unix ms.
    pub created_unix_ms: u64,
    /// The token that created it.
    pub created_by: String,
}

impl std::fmt::Debug for TokenRecord {
    /// Never prints the hash (it identifies the secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenRecord")
            .field("name", &self.name)
            .field("role", &self.role)
            .field("environments", &self.environments)
            .field("replicate", &self.replicate)
            .finish_non_exhaustive()
    }
}

/// Whether `t` is an admin token for all environments (one must remain).
fn full_admin(t: &TokenRecord) -> bool {
    t.role == Role::Admin && t.environments.is_empty()
}

/// What `Backend::revoke_token` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Revoked {
    /// Removed.
    Done,
    /// No token of that name is stored.
    NotFound,
    /// Kept: it is the last admin token for all environments.
    LastAdmin,
}

/// What revoking `name` out of `all` (every stored token) does: the
/// decision each backend makes on what it holds, under its lock.
pub(crate) fn revocation(all: &[TokenRecord], name: &str) -> Revoked {
    match all.iter().find(|t| t.name == name) {
        None => Revoked::NotFound,
        Some(t) if full_admin(t) && all.iter().filter(|t| full_admin(t)).count() == 1 => Revoked::LastAdmin,
        Some(_) => Revoked::Done,
    }
}
