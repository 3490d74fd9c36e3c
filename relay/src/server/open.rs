//! Startup's first step: the data directory's store opened for this
//! relay's role (sled or PostgreSQL), the admin tokens, and the demo
//! environment on a new primary.

use std::path::Path;
use std::sync::Arc;

use flagstream::Limits;

use crate::access::Tokens;
use crate::cluster::promote::ROLE_SETTING;
use crate::config::{Config, StoreUrl};
use crate::ops::metrics::Metrics;
use crate::ops::secret;
use crate::store::postgres::PostgresBackend;
use crate::store::sled::SledBackend;
use crate::store::{Backend, Retention, Source, Store};

/// The store and the tokens, opened.
pub(super) struct Opened {
    pub store: Store,
    pub tokens: Arc<Tokens>,
    /// The shared database, when the store is PostgreSQL (its change feed
    /// is started with the other background work).
    pub postgres: Option<PostgresBackend>,
}

/// Opens the store the configuration names, checks the data directory's
/// role, renews epochs a restored primary needs, opens the tokens (a new
/// primary's `bootstrap` token) and seeds the demo on a first start.
pub(super) async fn open(cfg: &Config, metrics: &Metrics) -> anyhow::Result<Opened> {
    let retention = Retention {
        revisions: cfg.store.changelog_revisions,
        bytes: cfg.store.changelog_bytes,
        audit_revisions: cfg.store.audit_revisions,
    };
    let mut marks_missing = false;
    let (backend, postgres): (Arc<dyn Backend>, _) = match &cfg.store.url {
        StoreUrl::Sled => {
            let sled = SledBackend::open_with_cache(&cfg.data_dir.join("db"), cfg.store.sled_cache_bytes)?;
            marks_missing = sled.marks_missing();
            (Arc::new(sled), None)
        }
        StoreUrl::Postgres(url) => {
            let pg = PostgresBackend::connect(url.expose(), metrics.clone()).await.map_err(|e| {
                anyhow::anyhow!("the PostgreSQL store: {}", flagstream::follow::error_chain(&e))
            })?;
            (Arc::new(pg.clone()), Some(pg))
        }
    };
    let source = match (&cfg.cluster.upstream, &postgres) {
        (Some(u), _) => Source::Replica { upstream: u.urls.join(",") },
        (None, Some(_)) => Source::Shared,
        (None, None) => Source::Primary,
    };
    check_role(backend.as_ref(), &source, &cfg.data_dir).await?;
    if marks_missing && matches!(source, Source::Primary) {
        restored_epochs(backend.as_ref(), metrics).await?;
    }
    let store = Store::open(backend.clone(), Limits::default(), retention, metrics.clone(), source).await?;
    let read_only = cfg.cluster.upstream.as_ref().map(|u| {
        format!("this relay is a replica (it follows {}); manage tokens at the primary", u.urls.join(","))
    });
    let (tokens, new_token) = Tokens::open(backend, &cfg.data_dir, read_only).await?;
    if cfg.cluster.upstream.is_none() {
        store.set_primary(cfg.cluster.advertise_url.clone());
    }
    if let Some(path) = &new_token {
        tracing::info!(path = %path.display(), "created the admin token `bootstrap` (role admin, all environments; shown once in this file, mode 0600)");
    }
    // The demo is seeded on the very first start only (when the admin token
    // is created), never again after its environments were deleted.
    if cfg.demo && cfg.cluster.upstream.is_none() && new_token.is_some() && store.envs().is_empty() {
        let key = super::demo::seed(&store).await?;
        let path = cfg.data_dir.join("demo-sdk-key");
        secret::write_private(&path, &key)?;
        tracing::info!(path = %path.display(), "seeded the demo environment; its SDK key is in this file");
    }
    Ok(Opened { store, tokens: Arc::new(tokens), postgres })
}

/// The role a data directory was made for (`role` setting): a primary's
/// store never becomes a replica's (its audit log and history would be
/// overwritten), and a replica's becomes a primary only by `promote`.
async fn check_role(backend: &dyn Backend, source: &Source, dir: &Path) -> anyhow::Result<()> {
    let want = match source {
        Source::Primary => "primary",
        Source::Replica { .. } => "replica",
        // The database is every relay's; there is no local role to guard.
        Source::Shared => return Ok(()),
    };
    let have = backend.setting(ROLE_SETTING).await?;
    match have.as_deref() {
        None => {
            // A new store, or one from before roles were recorded (always a
            // primary's). Every primary's store holds its bootstrap token.
            let legacy = !backend.tokens().await?.is_empty();
            if legacy && want == "replica" {
                anyhow::bail!(
                    "{} holds a primary's store; a replica needs a data directory of its own",
                    dir.display()
                );
            }
            backend.put_setting(ROLE_SETTING, want.to_owned()).await?;
            Ok(())
        }
        Some(r) if r == want => Ok(()),
        Some("replica") => anyhow::bail!(
            "{} holds a replica's store; to make it the primary run `flagstream-relay promote --data-dir {}` first (docs/OPERATIONS.md, promotion)",
            dir.display(),
            dir.display()
        ),
        Some(r) => anyhow::bail!(
            "{} holds a {r}'s store; a replica needs a data directory of its own",
            dir.display()
        ),
    }
}

/// A primary's sled store opened without its commit marks file (restored
/// from a backup with the file deleted, or accepted short after the marks
/// refused it: OPERATIONS.md §2): revisions after its head may have been
/// served, so every environment gets a new epoch (its revision continues)
/// and every subscriber resyncs once with a snapshot, never mistaking the
/// old revision numbers for new ones. A new data directory has nothing to
/// renew.
async fn restored_epochs(backend: &dyn Backend, metrics: &Metrics) -> anyhow::Result<()> {
    for r in crate::cluster::promote::new_epochs(backend, false).await? {
        metrics.limit_hit("history_lost");
        tracing::warn!(env = %r.name, revision = r.revision, old_epoch = %r.old, new_epoch = %r.new,
            "the data directory has no commit marks (restored, or accepted short): a new epoch; every subscriber resynchronises with a snapshot");
    }
    Ok(())
}
