//! Who may do what: named admin tokens with a role and a set of
//! environments, the principal a request was authenticated as, and the
//! authorization check every Admin method makes. Token records (the
//! secret only as its SHA-256) are stored by the store's backend and held
//! in memory behind an `ArcSwap`; a primary's first start creates an admin
//! token named `bootstrap` and writes its secret to the data directory
//! (mode 0600). A replica holds the tokens its upstream's catalog lists.
//!
//! Uses `store` (where token records live) and `ops::secret`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::Mutex;

use crate::ops::secret::{self, constant_time_eq, hash_secret, new_secret};
use crate::store::backend::Revoked;
pub(crate) use crate::store::token::{BOOTSTRAP, Role, TokenRecord};
use crate::store::{Backend, StoreError, now_ms};

/// Who a request was authenticated as: put in the request's extensions by
/// the admin interceptor.
#[derive(Debug, Clone)]
pub(crate) struct Principal(pub Arc<TokenRecord>);

impl Principal {
    /// The token's name.
    pub(crate) fn name(&self) -> &str {
        &self.0.name
    }

    /// Whether the token covers every environment.
    pub(crate) fn all_environments(&self) -> bool {
        self.0.environments.is_empty()
    }

    /// Whether the token may act on `env`.
    pub(crate) fn sees(&self, env: &str) -> bool {
        self.all_environments() || self.0.environments.iter().any(|e| e == env)
    }

    /// `Ok` if the token has `role` on `env` (`None`: on all
    /// environments); else [`AccessError::NotPermitted`] naming what is
    /// missing.
    pub(crate) fn require(&self, role: Role, env: Option<&str>, what: &str) -> Result<(), AccessError> {
        let t = &self.0;
        let scope_ok = match env {
            Some(e) => self.sees(e),
            None => self.all_environments(),
        };
        if t.role >= role && scope_ok {
            return Ok(());
        }
        let needs = match env {
            Some(e) => format!("role {} on environment {e:?}", role.name()),
            None => format!("role {} on all environments", role.name()),
        };
        let has = if t.environments.is_empty() {
            "all environments".to_owned()
        } else {
            format!("environments [{}]", t.environments.join(", "))
        };
        Err(AccessError::NotPermitted(format!(
            "token {:?} may not {what}: that needs {needs}; the token has role {} on {has}",
            t.name,
            t.role.name()
        )))
    }
}

/// Token errors.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// The token lacks the role or the environment (the message names
    /// what is needed and what the token has).
    #[error("{0}")]
    NotPermitted(String),
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// The name is taken.
    #[error("token {0:?} already exists")]
    Exists(String),
    /// No such token.
    #[error("token {0:?} not found")]
    NotFound(String),
    /// The relay holds `limit` tokens already (`quota-tokens`).
    #[error("a new token would make {used} admin tokens, the limit is {limit} (quota-tokens)")]
    Quota {
        /// Tokens there would be.
        used: usize,
        /// The quota.
        limit: usize,
    },
    /// Revoking it would leave no admin token for all environments.
    #[error("token {0:?} is the last admin token for all environments; create another first")]
    LastAdmin(String),
    /// The store failed.
    #[error("storage error")]
    Storage(#[from] StoreError),
    /// This relay is a replica: tokens are managed at the primary.
    #[error("{0}")]
    ReadOnly(String),
    /// Writing the bootstrap token file failed.
    #[error("writing the bootstrap token file")]
    Io(#[from] std::io::Error),
}

/// The registry of admin tokens.
#[derive(Debug)]
pub(crate) struct Tokens {
    backend: Arc<dyn Backend>,
    by_name: ArcSwap<BTreeMap<String, Arc<TokenRecord>>>,
    /// Serialises changes (create, revoke, replace).
    changes: Mutex<()>,
    /// Bumped on every change (replicas follow it in the catalog).
    changed: tokio::sync::watch::Sender<u64>,
    /// `Some(why)` on a replica: tokens are managed at the primary.
    read_only: Option<String>,
}

fn check_name(name: &str) -> Result<(), AccessError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(AccessError::Invalid(format!("name: {name:?}: 1-64 bytes of A-Z a-z 0-9 . _ -")))
    }
}

impl Tokens {
    /// Loads the tokens. On a primary's first start (no token at all)
    /// creates the `bootstrap` admin token, writes its secret to
    /// `dir/admin-token` (0600) and returns that path. `read_only` (a
    /// replica: why) creates nothing and refuses changes.
    pub(crate) async fn open(
        backend: Arc<dyn Backend>,
        dir: &Path,
        read_only: Option<String>,
    ) -> Result<(Tokens, Option<PathBuf>), AccessError> {
        let by_name: BTreeMap<String, Arc<TokenRecord>> =
            backend.tokens().await?.into_iter().map(|t| (t.name.clone(), Arc::new(t))).collect();
        let legacy = by_name.len() == 1 && by_name.contains_key(BOOTSTRAP);
        let tokens = Tokens {
            backend,
            by_name: ArcSwap::from_pointee(by_name),
            changes: Mutex::new(()),
            changed: tokio::sync::watch::channel(0).0,
            read_only,
        };
        let mut created = None;
        if tokens.read_only.is_none() && tokens.by_name.load().is_empty() {
            let secret = new_secret("fs_admin_");
            let path = dir.join(secret::ADMIN_TOKEN_FILE);
            secret::write_private(&path, &secret)?;
            created = Some(path.clone());
            let t = TokenRecord {
                name: BOOTSTRAP.into(),
                role: Role::Admin,
                environments: vec![],
                replicate: false,
                hash: hash_secret(&secret),
                created_unix_ms: now_ms(),
                created_by: "relay".into(),
            };
            // With a shared database another relay may have made it first:
            // then its secret is in that relay's data directory, not here.
            if tokens.backend.insert_token(t.clone()).await? {
                tokens.publish(|m| {
                    m.insert(t.name.clone(), Arc::new(t));
                });
            } else {
                std::fs::remove_file(&path)?;
                created = None;
                tokens.reload().await?;
                tracing::info!(
                    "another relay of this database created the bootstrap token; its secret is in that relay's data directory"
                );
            }
        } else if legacy && tokens.read_only.is_none() {
            // Stores the record of a pre-named-token store in today's form
            // (a no-op rewrite for a current store).
            if let Some(t) = tokens.by_name.load().get(BOOTSTRAP) {
                tokens.backend.put_token(TokenRecord::clone(t)).await?;
            }
        }
        Ok((tokens, created))
    }

    fn publish(&self, change: impl FnOnce(&mut BTreeMap<String, Arc<TokenRecord>>)) {
        let mut m = BTreeMap::clone(&self.by_name.load());
        change(&mut m);
        self.by_name.store(Arc::new(m));
        self.changed.send_modify(|v| *v += 1);
    }

    /// Reads every token again from the backend (another relay of a shared
    /// database changed them); returns the names revoked (or replaced)
    /// since, whose streams must end.
    pub(crate) async fn reload(&self) -> Result<Vec<String>, AccessError> {
        let records: BTreeMap<String, Arc<TokenRecord>> =
            self.backend.tokens().await?.into_iter().map(|t| (t.name.clone(), Arc::new(t))).collect();
        let old = self.by_name.load_full();
        if *old == records {
            return Ok(Vec::new());
        }
        // Gone, or replaced under the same name (a new secret).
        let gone = old
            .iter()
            .filter(|(name, t)| records.get(*name).is_none_or(|n| n.hash != t.hash))
            .map(|(name, _)| name.clone())
            .collect();
        self.publish(|m| *m = records);
        Ok(gone)
    }

    /// Whether `p`'s token still works (not revoked, not replaced by a new
    /// secret under its name): the revocation hook of long-lived calls,
    /// checked when [`Tokens::changes`] wakes them.
    pub(crate) fn is_current(&self, p: &Principal) -> bool {
        self.by_name.load().get(p.name()).is_some_and(|t| t.hash == p.0.hash)
    }

    /// A receiver that changes whenever a token is created or revoked.
    pub(crate) fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn check_writable(&self) -> Result<(), AccessError> {
        match &self.read_only {
            Some(why) => Err(AccessError::ReadOnly(why.clone())),
            None => Ok(()),
        }
    }

    /// Replaces every token with `records` (a replica applying its
    /// upstream's catalog); returns the names that are gone.
    pub(crate) async fn replace_all(&self, records: Vec<TokenRecord>) -> Result<Vec<String>, AccessError> {
        let _guard = self.changes.lock().await;
        let old = self.by_name.load_full();
        let new: BTreeMap<String, Arc<TokenRecord>> =
            records.into_iter().map(|t| (t.name.clone(), Arc::new(t))).collect();
        if *old == new {
            return Ok(Vec::new());
        }
        for (name, t) in &new {
            if old.get(name) != Some(t) {
                self.backend.put_token(TokenRecord::clone(t)).await?;
            }
        }
        let gone: Vec<String> = old.keys().filter(|n| !new.contains_key(*n)).cloned().collect();
        // Memory first for removals: a revoked token stops working at once.
        self.publish(|m| *m = new);
        for name in &gone {
            self.backend.remove_token(name.clone()).await?;
        }
        Ok(gone)
    }

    /// The token whose secret is `secret`.
    pub(crate) fn authenticate(&self, secret: &str) -> Option<Principal> {
        let hash = hash_secret(secret);
        // Every record compared in constant time; no early exit on a match
        // position that would tell which token is near.
        let mut found = None;
        for t in self.by_name.load().values() {
            if constant_time_eq(&t.hash, &hash) {
                found = Some(t.clone());
            }
        }
        found.map(Principal)
    }

    /// All tokens, by name.
    pub(crate) fn list(&self) -> Vec<Arc<TokenRecord>> {
        self.by_name.load().values().cloned().collect()
    }

    /// Creates a token, unless the relay holds `max` already; returns it
    /// and its secret (shown once).
    pub(crate) async fn create(
        &self,
        name: &str,
        role: Role,
        environments: Vec<String>,
        replicate: bool,
        created_by: &str,
        max: usize,
    ) -> Result<(Arc<TokenRecord>, String), AccessError> {
        self.check_writable()?;
        check_name(name)?;
        let _guard = self.changes.lock().await;
        if self.by_name.load().contains_key(name) {
            return Err(AccessError::Exists(name.to_owned()));
        }
        let used = self.by_name.load().len() + 1;
        if used > max {
            return Err(AccessError::Quota { used, limit: max });
        }
        let secret = new_secret("fs_admin_");
        let mut environments = environments;
        environments.sort();
        environments.dedup();
        let t = TokenRecord {
            name: name.to_owned(),
            role,
            environments,
            replicate,
            hash: hash_secret(&secret),
            created_unix_ms: now_ms(),
            created_by: created_by.to_owned(),
        };
        // Insert-if-absent: another relay of a shared database may have
        // made one of that name meanwhile.
        if !self.backend.insert_token(t.clone()).await? {
            return Err(AccessError::Exists(name.to_owned()));
        }
        let t = Arc::new(t);
        self.publish(|m| {
            m.insert(t.name.clone(), t.clone());
        });
        Ok((t, secret))
    }

    /// Revokes a token: durably first (on a shared database atomically
    /// with the last-admin check, against every relay), then here. A store
    /// that cannot take it leaves the token working here as it does on
    /// disk, and the caller is told ([`AccessError::Storage`]).
    pub(crate) async fn revoke(&self, name: &str) -> Result<(), AccessError> {
        self.check_writable()?;
        let _guard = self.changes.lock().await;
        match self.backend.revoke_token(name.to_owned()).await? {
            Revoked::Done => {
                self.publish(|m| {
                    m.remove(name);
                });
                Ok(())
            }
            Revoked::NotFound => {
                // Gone from the store (another relay of a shared database
                // revoked it, and the feed has not told us yet): gone here.
                if self.by_name.load().contains_key(name) {
                    self.publish(|m| {
                        m.remove(name);
                    });
                }
                Err(AccessError::NotFound(name.to_owned()))
            }
            Revoked::LastAdmin => Err(AccessError::LastAdmin(name.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn principal(role: Role, envs: &[&str]) -> Principal {
        Principal(Arc::new(TokenRecord {
            name: "t".into(),
            role,
            environments: envs.iter().map(|e| (*e).to_owned()).collect(),
            replicate: false,
            hash: String::new(),
            created_unix_ms: 0,
            created_by: String::new(),
        }))
    }

    #[test]
    fn roles_and_environments_gate_every_call() {
        let reader = principal(Role::Read, &["staging"]);
        assert!(reader.require(Role::Read, Some("staging"), "read flags").is_ok());
        let e = tonic::Status::from(reader.require(Role::Write, Some("staging"), "write flags").unwrap_err());
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("needs role write on environment \"staging\""), "{}", e.message());
        let e = reader.require(Role::Read, Some("prod"), "read flags").unwrap_err().to_string();
        assert!(e.contains("the token has role read on environments [staging]"), "{e}");
        let env_admin = principal(Role::Admin, &["prod"]);
        assert!(env_admin.require(Role::Admin, Some("prod"), "manage SDK keys").is_ok());
        assert!(env_admin.require(Role::Admin, None, "create environments").is_err());
        assert!(principal(Role::Admin, &[]).require(Role::Admin, None, "create environments").is_ok());
    }

    #[tokio::test]
    async fn bootstrap_then_named_tokens_then_revocation() {
        let dir = tempfile::tempdir().unwrap();
        let backend: Arc<dyn Backend> =
            Arc::new(crate::store::sled::SledBackend::open(&dir.path().join("db")).unwrap());
        let (tokens, created) = Tokens::open(backend.clone(), dir.path(), None).await.unwrap();
        let secret = std::fs::read_to_string(created.expect("bootstrap created")).unwrap();
        assert_eq!(tokens.authenticate(secret.trim()).unwrap().name(), BOOTSTRAP);
        let (_, ci) =
            tokens.create("ci", Role::Write, vec!["prod".into()], false, BOOTSTRAP, 10).await.unwrap();
        assert!(matches!(
            tokens.create("ci", Role::Read, vec![], false, BOOTSTRAP, 10).await,
            Err(AccessError::Exists(_))
        ));
        assert!(matches!(tokens.revoke(BOOTSTRAP).await, Err(AccessError::LastAdmin(_))));
        drop(tokens);
        // Persisted: a reopen knows both, creates nothing.
        let (tokens, created) = Tokens::open(backend, dir.path(), None).await.unwrap();
        assert!(created.is_none());
        assert_eq!(tokens.authenticate(&ci).unwrap().name(), "ci");
        tokens.revoke("ci").await.unwrap();
        assert!(tokens.authenticate(&ci).is_none());
        assert!(format!("{:?}", tokens.list()).contains("bootstrap"));
        assert!(!format!("{:?}", tokens.list()).contains(&hash_secret(secret.trim())), "Debug shows a hash");
    }
}
