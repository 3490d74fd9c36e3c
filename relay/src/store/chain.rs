//! Reading and checking audit chains: an environment's, a deleted
//! environment's archive, and the relay's own chain of admin token events.
//! A check takes the chain's head and walks the records up to it in
//! bounded pages, holding no lock.

use std::sync::Arc;

use super::audit::{self, AuditPos, AuditRecord, Verification, Who};
use super::state::Kind;
use super::{Env, Store, StoreError, archived_env};

/// Audit records read per page of a chain walk ([`Store::verify_audit`]):
/// each at most ~17 KiB (a capped diff), so a page stays within a few MiB.
const VERIFY_PAGE: usize = 256;

/// Walks of one verification when retention overtakes it.
const VERIFY_ATTEMPTS: usize = 3;

impl Store {
    /// Audit entries of an environment (or of a deleted one's archive,
    /// [`archived_env`], or the relay's chain), newest first.
    pub(crate) async fn audit(
        &self,
        env: &str,
        key: Option<(Kind, &str)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
        self.chain_end(env).await?;
        let item = key.map(|(k, s)| (k, s.to_owned()));
        self.inner.backend.audit(env.to_owned(), item, limit, before).await
    }

    /// Where `env`'s chain ends now: its head revision and hash, and the
    /// live environment (`None` for an archive).
    async fn chain_end(&self, env: &str) -> Result<(u64, String, Option<Arc<Env>>), StoreError> {
        if env == audit::RELAY_CHAIN {
            let end = self.inner.backend.archive_head(env.to_owned()).await?;
            // No token event recorded yet: an empty chain (revision 0, head "").
            let (revision, head) = end.unwrap_or_default();
            return Ok((revision, head, None));
        }
        if archived_env(env).is_some() {
            let (revision, head) = self
                .inner
                .backend
                .archive_head(env.to_owned())
                .await?
                .ok_or_else(|| StoreError::EnvNotFound(env.to_owned()))?;
            return Ok((revision, head, None));
        }
        let live = self.env(env)?;
        let meta = live.meta.load();
        Ok((meta.revision, meta.audit_head.clone(), Some(live.clone())))
    }

    /// Records an admin token event on the relay's chain
    /// ([`audit::RELAY_CHAIN`]), after the change it records.
    pub(crate) async fn record_token_event(
        &self,
        event: audit::Access,
        token: &str,
        details: String,
        who: &Who,
    ) -> Result<(), StoreError> {
        let rec = audit::access_record(event, token, details, who);
        self.inner.backend.append_relay_audit(rec).await?;
        Ok(())
    }

    /// Checks an environment's audit hash chain (or an archived one's, or
    /// the relay's).
    ///
    /// Holds no lock: the head (revision and hash, one consistent
    /// metadata record) is taken first, and the records up to it are read
    /// in pages of [`VERIFY_PAGE`], so writes go on meanwhile and memory
    /// stays bounded whatever the log's size. Records written meanwhile at
    /// later revisions are left out; a retention trim that overtook the
    /// walk starts it again (at most [`VERIFY_ATTEMPTS`] times).
    pub(crate) async fn verify_audit(&self, env: &str) -> Result<Verification, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (revision, head, live) = self.chain_end(env).await?;
            let mut walk = audit::Walk::new(&head);
            loop {
                let page = self
                    .inner
                    .backend
                    .audit_page(env.to_owned(), walk.last(), (revision, u32::MAX), VERIFY_PAGE)
                    .await?;
                let full = page.len() == VERIFY_PAGE;
                for (pos, rec) in page {
                    if !walk.push(pos, rec)? {
                        break;
                    }
                }
                if walk.broken().is_some() || !full {
                    break;
                }
            }
            let now = match &live {
                Some(e) => {
                    let m = e.meta.load();
                    (m.revision == revision).then(|| m.audit_head.clone())
                }
                None => Some(head.clone()),
            };
            // Records the walk had not reached may have been dropped by the
            // retention meanwhile (the head moved on): a gap right above the
            // retention floor is that, not a removal. Walk again.
            let trimmed = |pos: AuditPos| {
                live.as_ref().is_some_and(|e| {
                    let r = e.meta.load().revision;
                    r > revision && self.inner.retention.audit_floor(r).is_some_and(|f| pos.0 <= f + 1)
                })
            };
            if let Some((pos, _)) = walk.broken()
                && trimmed(*pos)
                && attempt < VERIFY_ATTEMPTS
            {
                continue;
            }
            return Ok(walk.finish(now.as_deref()));
        }
    }
}
