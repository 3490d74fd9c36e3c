//! SDK keys: several per environment, kept in its metadata (the secret
//! only as its SHA-256). Creating, rotating (the old key keeps working for
//! a grace period), revoking and expiring keys each rewrite the metadata
//! under the environment's write lock, durably, on a task the caller does
//! not own; the caller (the Admin API, the expiry task) then ends the
//! streams of keys that stopped working.

use std::sync::Arc;

use super::audit::{self, Access, AuditRecord, Who};
use super::meta::{EnvMeta, SdkKeyRecord};
use super::{Store, StoreError, now_ms};
use crate::ops::secret;

/// Longest rotation grace period: 30 days.
const MAX_GRACE_MS: u64 = 30 * 24 * 3600 * 1000;

/// Longest key name, bytes.
const MAX_NAME: usize = 128;

fn invalid(path: &str, message: String) -> StoreError {
    StoreError::Invalid(flagstream::ValidationErrors(vec![flagstream::ValidationError {
        path: path.into(),
        message,
    }]))
}

fn check_name(name: &str) -> Result<(), StoreError> {
    if name.len() > MAX_NAME {
        return Err(invalid("name", format!("{} bytes, limit {MAX_NAME}", name.len())));
    }
    Ok(())
}

/// A new key record and its secret: a client-side key's starts
/// `fs_client_`, a server-side one's `fs_sdk_`.
fn make_key(meta: &mut EnvMeta, name: &str, created_by: &str, client: bool) -> (SdkKeyRecord, String) {
    let secret = secret::new_secret(if client { "fs_client_" } else { "fs_sdk_" });
    meta.keys_made += 1;
    let key = SdkKeyRecord {
        id: format!("k{}", meta.keys_made),
        name: name.to_owned(),
        hash: secret::hash_secret(&secret),
        created_unix_ms: now_ms(),
        expires_unix_ms: 0,
        created_by: created_by.to_owned(),
        client,
    };
    meta.sdk_keys.push(key.clone());
    (key, secret)
}

/// An empty key record (for a rotation's replaced key that is gone).
fn key_stub() -> SdkKeyRecord {
    SdkKeyRecord {
        id: String::new(),
        name: String::new(),
        hash: String::new(),
        created_unix_ms: 0,
        expires_unix_ms: 0,
        created_by: String::new(),
        client: false,
    }
}

/// A key event's record, sealed onto `meta`'s chain at its revision. Its
/// details name the key (id, name, maker, expiry), never its secret or
/// hash.
fn key_event(
    event: Access,
    key: &SdkKeyRecord,
    replaced: Option<&SdkKeyRecord>,
    meta: &mut EnvMeta,
    who: &Who,
) -> Result<AuditRecord, StoreError> {
    let mut details = format!("id: {}\nname: {:?}\ncreated_by: {:?}\n", key.id, key.name, key.created_by);
    if key.client {
        details.push_str("client: true\n");
    }
    if let Some(old) = replaced {
        details.push_str(&format!(
            "replaces: {}\nreplaced_expires_unix_ms: {}\n",
            old.id,
            if old.expires_unix_ms == 0 {
                "0 (removed now)".to_owned()
            } else {
                old.expires_unix_ms.to_string()
            }
        ));
    }
    audit::seal_access(event, &key.id, details, meta.revision, who, &mut meta.audit_head)
}

/// The SDK key quota in force, checked against the stored metadata.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyQuota {
    /// Most keys of one environment (`quota-sdk-keys-per-env`).
    pub limit: usize,
}

impl KeyQuota {
    /// Refuses a change that adds `adding` keys to `meta` past the quota
    /// (keys still in a rotation's grace count).
    fn check(&self, meta: &EnvMeta, adding: usize) -> Result<(), StoreError> {
        let used = meta.sdk_keys.len() + adding;
        if adding > 0 && used > self.limit {
            return Err(StoreError::Quota {
                env: meta.name.clone(),
                what: "SDK keys",
                quota: "sdk_keys",
                setting: "quota-sdk-keys-per-env",
                used,
                limit: self.limit,
            });
        }
        Ok(())
    }
}

impl Store {
    /// The SDK key quota in force (reloaded with the size quotas).
    fn key_quota(&self) -> KeyQuota {
        KeyQuota { limit: self.inner.size_quota.load().sdk_keys }
    }
}

/// What a rotation did.
#[derive(Debug, Clone)]
pub(crate) struct Rotated {
    /// The old key with its expiry; `None` when the grace was 0 (gone).
    pub old: Option<SdkKeyRecord>,
    /// The new key.
    pub key: SdkKeyRecord,
    /// The new key's secret.
    pub secret: String,
}

impl Store {
    /// Rewrites `env`'s metadata with `change` under its write lock,
    /// durably, whatever happens to the caller; returns what `change`
    /// returned.
    pub(crate) async fn change_meta<T: Send + 'static>(
        &self,
        env: &str,
        change: impl FnOnce(&mut EnvMeta) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.change_meta_audited(env, move |meta| Ok((change(meta)?, None))).await
    }

    /// [`Store::change_meta`] with an audit record: `change` may return one,
    /// sealed onto the metadata's chain (its `audit_head` moved to it), and
    /// the backend stores it with the metadata, atomically.
    pub(crate) async fn change_meta_audited<T: Send + 'static>(
        &self,
        env: &str,
        change: impl FnOnce(&mut EnvMeta) -> Result<(T, Option<AuditRecord>), StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (this, env) = (self.clone(), self.env(env)?);
        self.detached(async move {
            let _write = env.write.lock().await;
            env.check_writable()?;
            // The backend applies the change (to the stored record, in a
            // shared database); the output comes back through `out`.
            let out = Arc::new(std::sync::Mutex::new(None));
            let (slot, mut change) = (out.clone(), Some(change));
            let apply: super::backend::MetaChange = Box::new(move |meta| {
                let f = change
                    .take()
                    .ok_or_else(|| StoreError::Storage("a metadata change was applied twice".into()))?;
                let (out, record) = f(meta)?;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(out);
                Ok(record)
            });
            let current = EnvMeta::clone(&env.meta.load());
            let name = current.name.clone();
            let meta = match this.inner.backend.update_meta(current, apply).await {
                Ok(m) => m,
                Err(e @ (StoreError::Invalid(_) | StoreError::KeyNotFound { .. })) => return Err(e),
                Err(e @ StoreError::Quota { .. }) => {
                    if let StoreError::Quota { env, quota, .. } = &e {
                        this.inner.metrics.quota_refusal(env, quota);
                    }
                    return Err(e);
                }
                Err(e) => {
                    this.poison(&env, &name, &e);
                    return Err(e);
                }
            };
            env.meta.store(Arc::new(meta));
            this.catalog_changed();
            let taken = out.lock().unwrap_or_else(|p| p.into_inner()).take();
            taken.ok_or_else(|| StoreError::Storage("a metadata change produced nothing".into()))
        })
        .await
    }

    /// Creates another SDK key for `env` (a client-side one when
    /// `client`); returns it and its secret.
    pub(crate) async fn create_sdk_key(
        &self,
        env: &str,
        name: &str,
        client: bool,
        who: &Who,
    ) -> Result<(SdkKeyRecord, String), StoreError> {
        self.check_writable()?;
        check_name(name)?;
        let (name, who, quota) = (name.to_owned(), who.clone(), self.key_quota());
        self.change_meta_audited(env, move |meta| {
            quota.check(meta, 1)?;
            let (key, secret) = make_key(meta, &name, &who.principal, client);
            let rec = key_event(Access::SdkKeyCreate, &key, None, meta, &who)?;
            Ok(((key, secret), Some(rec)))
        })
        .await
    }

    /// The keys of `env` that work now.
    pub(crate) fn sdk_keys(&self, env: &str) -> Result<Vec<SdkKeyRecord>, StoreError> {
        let now = now_ms();
        Ok(self.env(env)?.meta.load().sdk_keys.iter().filter(|k| k.valid_at(now)).cloned().collect())
    }

    /// Replaces key `id` of `env` with a new one; the old one keeps working
    /// for `grace_ms` (0: removed now).
    pub(crate) async fn rotate_sdk_key(
        &self,
        env: &str,
        id: &str,
        grace_ms: u64,
        name: &str,
        who: &Who,
    ) -> Result<Rotated, StoreError> {
        self.check_writable()?;
        check_name(name)?;
        if grace_ms > MAX_GRACE_MS {
            return Err(invalid("grace_ms", format!("{grace_ms} ms, limit {MAX_GRACE_MS} (30 days)")));
        }
        let (env_name, id, name, who, quota) =
            (env.to_owned(), id.to_owned(), name.to_owned(), who.clone(), self.key_quota());
        self.change_meta_audited(env, move |meta| {
            let now = now_ms();
            let Some(i) = meta.sdk_keys.iter().position(|k| k.id == id && k.valid_at(now)) else {
                return Err(StoreError::KeyNotFound { env: env_name, id });
            };
            // With a grace period the old key stays: one key more.
            quota.check(meta, usize::from(grace_ms > 0))?;
            // The new key keeps the old one's kind, and its name unless
            // renamed.
            let (old_name, client) = (meta.sdk_keys[i].name.clone(), meta.sdk_keys[i].client);
            let old = if grace_ms == 0 {
                meta.sdk_keys.remove(i);
                None
            } else {
                let k = &mut meta.sdk_keys[i];
                let until = now + grace_ms;
                // A second rotation never extends an earlier, shorter grace.
                k.expires_unix_ms = if k.expires_unix_ms == 0 { until } else { k.expires_unix_ms.min(until) };
                Some(k.clone())
            };
            let new_name = if name.is_empty() { old_name } else { name };
            let replaced = old.clone().unwrap_or_else(|| SdkKeyRecord { id, client, ..key_stub() });
            let (key, secret) = make_key(meta, &new_name, &who.principal, client);
            let rec = key_event(Access::SdkKeyRotate, &key, Some(&replaced), meta, &who)?;
            Ok((Rotated { old, key, secret }, Some(rec)))
        })
        .await
    }

    /// Removes key `id` of `env` at once.
    pub(crate) async fn revoke_sdk_key(&self, env: &str, id: &str, who: &Who) -> Result<(), StoreError> {
        self.check_writable()?;
        let (env_name, id, who) = (env.to_owned(), id.to_owned(), who.clone());
        self.change_meta_audited(env, move |meta| {
            let Some(gone) = meta.sdk_keys.iter().find(|k| k.id == id).cloned() else {
                return Err(StoreError::KeyNotFound { env: env_name, id });
            };
            meta.sdk_keys.retain(|k| k.id != id);
            let rec = key_event(Access::SdkKeyRevoke, &gone, None, meta, &who)?;
            Ok(((), Some(rec)))
        })
        .await
    }

    /// Removes every key whose grace period is over; returns
    /// `(environment, key id)` of each (their streams must end).
    pub(crate) async fn expire_sdk_keys(&self) -> Vec<(String, String)> {
        let now = now_ms();
        let mut out = Vec::new();
        for env in self.envs() {
            let meta = env.meta.load();
            if meta.sdk_keys.iter().all(|k| k.valid_at(now)) {
                continue;
            }
            let name = meta.name.clone();
            let gone: Vec<String> =
                meta.sdk_keys.iter().filter(|k| !k.valid_at(now)).map(|k| k.id.clone()).collect();
            drop(meta);
            let removed = self
                .change_meta(&name, move |meta| {
                    meta.sdk_keys.retain(|k| k.valid_at(now));
                    Ok(())
                })
                .await;
            if let Err(e) = removed {
                // Lookups refuse an expired key already, and its streams
                // end below; the removal from disk is retried next tick.
                tracing::error!(env = %name, error = %e, "removing expired SDK keys failed");
            }
            out.extend(gone.into_iter().map(|id| (name.clone(), id)));
        }
        out
    }

    /// Replaces `env`'s description, SDK keys and CORS origins with its
    /// upstream's (a replica applying the catalog); returns the ids of keys
    /// that are gone (their streams must end).
    pub(crate) async fn replace_keys(
        &self,
        env: &str,
        description: String,
        keys: Vec<SdkKeyRecord>,
        cors_origins: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let current = self.env(env)?.meta.load_full();
        if current.description == description
            && current.sdk_keys == keys
            && current.cors_origins == cors_origins
        {
            return Ok(Vec::new());
        }
        self.change_meta(env, move |meta| {
            let gone = meta
                .sdk_keys
                .iter()
                .filter(|k| !keys.iter().any(|n| n.id == k.id))
                .map(|k| k.id.clone())
                .collect();
            meta.description = description;
            meta.sdk_keys = keys;
            meta.cors_origins = cors_origins;
            Ok(gone)
        })
        .await
    }
}
