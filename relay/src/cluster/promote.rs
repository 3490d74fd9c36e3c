//! Promotion: turning a stopped replica's data directory into a primary's
//! (the manual failover runbook in docs/OPERATIONS.md).
//!
//! Every environment gets a new epoch and an empty change log. The old
//! primary may have committed revisions this replica never received, and
//! other relays or SDKs may hold them: reusing the old epoch would let the
//! new primary's revision r+1 meet a cursor at the old r+1 with different
//! content. A new epoch makes every such cursor foreign, so each subscriber
//! gets one full snapshot (a clean resync) and never mixed state.
//! Revision numbers continue, so humans see them grow.
//!
//! The same renewal serves a primary whose store was restored or cut back
//! (started without its commit marks: `server.rs`), where the same reasoning
//! holds: revisions after the restored head were served and are gone.

use std::path::Path;
use std::sync::Arc;

use crate::ops::secret;
use crate::store::backend::Commit;
use crate::store::sled::SledBackend;
use crate::store::{Backend, Retention};

/// The store setting naming the role its data directory was made for.
pub(crate) const ROLE_SETTING: &str = "role";

/// Promotes the replica store in `data_dir`; prints what changed.
pub(crate) async fn promote(data_dir: &Path) -> anyhow::Result<()> {
    let backend: Arc<dyn Backend> = Arc::new(SledBackend::open(&data_dir.join("db")).map_err(|e| {
        anyhow::anyhow!(
            "opening {}: {} (is the relay still running?)",
            data_dir.display(),
            flagstream::follow::error_chain(&e)
        )
    })?);
    match backend.setting(ROLE_SETTING).await?.as_deref() {
        Some("replica") => {}
        Some(other) => anyhow::bail!("{} holds a {other}'s store, not a replica's", data_dir.display()),
        None => anyhow::bail!("{} holds no replica store", data_dir.display()),
    }
    for r in new_epochs(backend.as_ref(), true).await? {
        println!("environment {:?}: revision {}, epoch {:?} -> {:?}", r.name, r.revision, r.old, r.new);
    }
    backend.put_setting(ROLE_SETTING, "primary".to_owned()).await?;
    backend.flush().await?;
    println!(
        "promoted {}: start it with --role primary; point the other replicas' --upstream at it",
        data_dir.display()
    );
    Ok(())
}

/// One environment given a new epoch.
pub(crate) struct Renewed {
    pub(crate) name: String,
    pub(crate) revision: u64,
    pub(crate) old: String,
    pub(crate) new: String,
}

/// Gives every environment of `backend` a new epoch and an empty change
/// log, keeping its items and revision. `replica`: the store was a
/// replica's (it has no audit chain; an environment that never received
/// data is reset to revision 0).
pub(crate) async fn new_epochs(backend: &dyn Backend, replica: bool) -> anyhow::Result<Vec<Renewed>> {
    let all = Retention { revisions: usize::MAX, bytes: usize::MAX, audit_revisions: usize::MAX };
    let envs = backend.load(all).await?;
    let mut renewed = Vec::with_capacity(envs.len());
    for env in envs {
        let mut meta = env.meta;
        let old = std::mem::replace(&mut meta.epoch, secret::new_epoch());
        if old.is_empty() {
            // It never received data: nothing to serve. Keep it empty; the
            // new primary serves it at revision 0 of the new epoch.
            meta.revision = 0;
            meta.checksum = 0;
        }
        if replica {
            meta.audit_head.clear();
        }
        renewed.push(Renewed {
            name: meta.name.clone(),
            revision: meta.revision,
            old,
            new: meta.epoch.clone(),
        });
        backend
            .commit(Commit {
                base: meta.revision,
                meta,
                items: Vec::new().into(),
                entry: None,
                trimmed: Vec::new(),
                reset_log: true,
                audit: Vec::new(),
                audit_floor: None,
                request_id: String::new(),
            })
            .await?;
    }
    backend.flush().await?;
    Ok(renewed)
}
