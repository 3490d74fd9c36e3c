//! Creating and deleting environments: at the primary by admin request, on
//! a replica as the upstream's catalog says. Each runs on a task the
//! caller does not own, so it completes whole whatever happens to the
//! caller.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use flagstream::{Snapshot, ValidationErrors};

use super::audit::{self, Access, AuditRecord, Who};
use super::meta::{EnvMeta, SdkKeyRecord};
use super::state::{EnvState, Items, Log};
use super::{Env, Store, StoreError, now_ms};
use crate::ops::secret;

/// Checks an environment name: 1–64 bytes of `A-Z a-z 0-9 - _`.
pub(crate) fn check_env_name(name: &str) -> Result<(), StoreError> {
    if name.is_empty()
        || name.len() > 64
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    {
        return Err(ValidationErrors(vec![flagstream::ValidationError {
            path: "name".into(),
            message: format!("{name:?}: 1-64 bytes of A-Z a-z 0-9 - _"),
        }])
        .into());
    }
    Ok(())
}

impl Store {
    /// Creates an environment; returns it and its SDK key (shown once,
    /// stored only as a hash). Its audit chain starts with the creation's
    /// record. Completes even if the caller goes away.
    pub(crate) async fn create_env(
        &self,
        name: &str,
        description: &str,
        who: &Who,
    ) -> Result<(Arc<Env>, String), StoreError> {
        let created_by = who.principal.as_str();
        self.check_writable()?;
        check_env_name(name)?;
        let sdk_key = secret::new_secret("fs_sdk_");
        let now = now_ms();
        let meta = EnvMeta {
            name: name.to_owned(),
            description: description.to_owned(),
            epoch: secret::new_epoch(),
            revision: 0,
            checksum: 0,
            committed_unix_ms: now,
            created_unix_ms: now,
            sdk_key_hash: String::new(),
            sdk_keys: vec![SdkKeyRecord {
                id: "k1".into(),
                name: "default".into(),
                hash: secret::hash_secret(&sdk_key),
                created_unix_ms: now,
                expires_unix_ms: 0,
                created_by: created_by.to_owned(),
                client: false,
            }],
            keys_made: 1,
            audit_head: String::new(),
            confirmed_unix_ms: 0,
            cors_origins: Vec::new(),
        };
        let details = format!("description: {description:?}\nsdk_key: k1\nsdk_key_name: \"default\"\n");
        let mut meta = meta;
        let rec = audit::seal_access(Access::EnvironmentCreate, name, details, 0, who, &mut meta.audit_head)?;
        let env = self.add_env_audited(meta, Some(rec)).await?;
        Ok((env, sdk_key))
    }

    /// Stores and registers a new, empty environment. A replica's
    /// environments start with an empty epoch: no data until the upstream
    /// sends its first snapshot.
    pub(crate) async fn add_env(&self, meta: EnvMeta) -> Result<Arc<Env>, StoreError> {
        self.add_env_audited(meta, None).await
    }

    /// [`Store::add_env`] with the chain's first record.
    async fn add_env_audited(
        &self,
        meta: EnvMeta,
        audit: Option<AuditRecord>,
    ) -> Result<Arc<Env>, StoreError> {
        let this = self.clone();
        self.detached(async move {
            let _guard = this.inner.envs_lock.lock().await;
            if this.inner.envs.load().contains_key(&meta.name) {
                return Err(StoreError::EnvExists(meta.name));
            }
            // A crash during an earlier delete may have left this name's
            // data in a local store. A shared database's may be another
            // relay's live environment: its create refuses an existing name.
            if !this.inner.backend.shared() {
                this.inner.backend.delete_env(meta.name.clone(), None).await?;
            }
            this.inner.backend.create_env(meta.clone(), audit).await?;
            let state = EnvState::new(
                meta.name.clone(),
                meta.epoch.clone(),
                meta.revision,
                meta.committed_unix_ms,
                Items::new(),
                Log::new(),
                Arc::new(Snapshot::empty().compiling_on_use()),
            );
            let name = meta.name.clone();
            let env = Arc::new(Env::new(state, meta));
            let mut all = HashMap::clone(&this.inner.envs.load());
            all.insert(name, env.clone());
            this.inner.envs.store(Arc::new(all));
            this.update_gauges();
            this.catalog_changed();
            Ok(env)
        })
        .await
    }

    /// Deletes an environment and all its data but its audit records:
    /// those are kept under an archive name (returned), `NAME.deleted.MS`,
    /// ending with the deletion's record, so `ListAudit` and `VerifyAudit`
    /// still read and check them. Subscribers see it vanish (their streams
    /// end). Completes even if the caller goes away.
    pub(crate) async fn delete_env(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        who: &Who,
    ) -> Result<String, StoreError> {
        self.check_writable()?;
        let archive = format!("{name}.deleted.{}", now_ms());
        let details = format!("archived_as: {archive}\n");
        let rec = audit::access_record(Access::EnvironmentDelete, name, details, who);
        self.drop_env(name, expected_revision, Some((archive.clone(), rec))).await?;
        Ok(archive)
    }

    /// [`Store::delete_env`] without the primary check and without keeping
    /// an audit log (a replica removes what its upstream removed; it holds
    /// none).
    pub(crate) async fn remove_env(
        &self,
        name: &str,
        expected_revision: Option<u64>,
    ) -> Result<(), StoreError> {
        self.drop_env(name, expected_revision, None).await
    }

    async fn drop_env(
        &self,
        name: &str,
        expected_revision: Option<u64>,
        archive: Option<(String, AuditRecord)>,
    ) -> Result<(), StoreError> {
        let (this, name) = (self.clone(), name.to_owned());
        self.detached(async move {
            let _guard = this.inner.envs_lock.lock().await;
            let env = this.env(&name)?;
            let _write = env.write.lock().await;
            env.check_writable()?;
            let current = env.state.load().revision;
            if let Some(expected) = expected_revision.filter(|e| *e != current) {
                return Err(StoreError::RevisionConflict { env: name, expected, current });
            }
            if let Err(e) = this.inner.backend.delete_env(name.clone(), archive).await {
                // Part of the environment may be gone from disk: no write may
                // build on memory any more.
                this.poison(&env, &name, &e);
                return Err(e);
            }
            this.forget_env(&env, &name);
            Ok(())
        })
        .await
    }

    /// Removes an environment another writer of the shared database
    /// deleted (memory only); its streams end.
    pub(crate) async fn unregister_env(&self, name: &str) {
        let _guard = self.inner.envs_lock.lock().await;
        let Ok(env) = self.env(name) else { return };
        let _write = env.write.lock().await;
        self.forget_env(&env, name);
    }

    /// Drops `env` from memory: lookups fail, its subscribers' streams end.
    fn forget_env(&self, env: &Env, name: &str) {
        env.deleted.store(true, Ordering::Release);
        let mut all = HashMap::clone(&self.inner.envs.load());
        all.remove(name);
        self.inner.envs.store(Arc::new(all));
        // Wake subscribers so they notice the environment is gone.
        env.head.send_modify(|h| *h = u64::MAX);
        env.waiters.wake_all();
        let labels = vec![("env", name.to_owned())];
        let m = &self.inner.metrics;
        m.store_items.remove(&labels);
        m.store_bytes.remove(&labels);
        m.head_revision.remove(&labels);
        m.upstream_live.remove(&labels);
        m.staleness_seconds.remove(&labels);
        self.tell_env_gone(name);
        self.catalog_changed();
    }
}
