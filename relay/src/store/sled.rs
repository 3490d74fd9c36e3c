//! The embedded backend: one sled database in the data directory.
//!
//! Trees: `meta` (`env/{name}` → JSON [`EnvMeta`], `token/{name}` → JSON
//! [`TokenRecord`], `setting/{name}` → text); per environment
//! `items/{name}` (`kind byte ‖ key` → the item's protobuf bytes),
//! `log/{name}` (revision, big-endian → JSON [`LogEntry`]) and
//! `audit/{name}` (revision ‖ sequence, big-endian → JSON
//! [`AuditRecord`]). A deleted environment's audit records are kept in
//! `audit/{archive}` (an archive name no environment can have), its head
//! in `meta` at `archive/{archive}`. A commit writes all four in one sled
//! transaction and
//! flushes before it returns, so a crash leaves either the old revision or
//! the new one, never a mix; one that changes many items writes them as a
//! new generation of the items tree first (`items/{name}#{n}`, named in
//! `meta` at `items-gen/{name}`; `generation.rs`). sled is synchronous: every call runs on
//! tokio's blocking pool.

use std::collections::BTreeMap;
use std::path::Path;

use async_trait::async_trait;
use bytes::Bytes;
use sled::Transactional;
use sled::transaction::{ConflictableTransactionError, TransactionError};

use super::audit::{AuditPos, AuditRecord};
use super::backend::{AuditRows, Backend, Commit, Committed, Loaded, Revoked};
use super::mark::Marks;
use super::meta::EnvMeta;
use super::state::{ItemKey, Kind, Log, LogEntry};
use super::token::{BOOTSTRAP, Role, TokenRecord};
use super::{Retention, StoreError, corrupt, to_json, trim_log};

mod generation;
#[cfg(test)]
mod tests;
use generation::{BULK_ITEMS, gen_key};

/// Prefix of token records in the `meta` tree.
const TOKEN_PREFIX: &str = "token/";
/// Prefix of settings in the `meta` tree.
const SETTING_PREFIX: &str = "setting/";
/// Prefix of archived audit chains' heads in the `meta` tree.
const ARCHIVE_PREFIX: &str = "archive/";

/// An archived chain's head, as stored.
#[derive(serde::Serialize, serde::Deserialize)]
struct ArchiveHead {
    revision: u64,
    head: String,
}
/// sled key of the admin token's hash from before named tokens: read as
/// the `bootstrap` token and removed once that is stored.
const LEGACY_TOKEN_KEY: &str = "admin_token_sha256";

/// sled's page cache by default (sled's own default is 1 GiB; relay option
/// `sled-cache-bytes`). The relay holds every item in memory and reads
/// sled only at start, so the cache only speeds up commits; bounded so a
/// relay under a heavy write load does not grow towards a gigabyte of
/// cached pages. 16 MiB: filling a 50 MiB environment peaks 20–40 MiB
/// lower than with 64 MiB, at a few percent of fill time
/// (docs/RESILIENCE.md §5).
pub(crate) const SLED_CACHE_BYTES: u64 = 16 << 20;

/// The sled backend. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct SledBackend {
    db: sled::Db,
    meta: sled::Tree,
    /// What was committed, kept outside sled (see `mark.rs`).
    marks: std::sync::Arc<Marks>,
    /// The database's directory.
    dir: std::path::PathBuf,
}

impl SledBackend {
    /// Opens (or creates) the database in `dir`, with the default page cache.
    pub(crate) fn open(dir: &Path) -> Result<SledBackend, StoreError> {
        SledBackend::open_with_cache(dir, SLED_CACHE_BYTES)
    }

    /// Opens (or creates) the database in `dir`, its page cache bounded to
    /// `cache_bytes`.
    pub(crate) fn open_with_cache(dir: &Path, cache_bytes: u64) -> Result<SledBackend, StoreError> {
        let marks = std::sync::Arc::new(Marks::open(dir)?);
        // Owner-only before sled writes anything, and what it wrote after.
        crate::ops::permission::make_private(dir).map_err(sled::Error::Io)?;
        let db = sled::Config::new().path(dir).cache_capacity(cache_bytes).open()?;
        crate::ops::permission::make_private(dir).map_err(sled::Error::Io)?;
        let meta = db.open_tree("meta")?;
        Ok(SledBackend { db, meta, marks, dir: dir.to_owned() })
    }

    /// Whether the data directory had no commit marks file when opened
    /// (see `mark.rs`).
    pub(crate) fn marks_missing(&self) -> bool {
        self.marks.missing()
    }

    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce(&SledBackend) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || work(&this)).await.map_err(StoreError::Task)?
    }

    fn put_meta_now(&self, m: &EnvMeta) -> Result<(), StoreError> {
        self.meta.insert(meta_key(&m.name), to_json("environment metadata", m)?)?;
        Ok(())
    }

    fn load_now(&self, retention: Retention) -> Result<Vec<Loaded>, StoreError> {
        let mut out = Vec::new();
        for r in self.meta.scan_prefix(b"env/") {
            let (k, v) = r?;
            let meta: EnvMeta = serde_json::from_slice(&v)
                .map_err(|e| corrupt(format!("metadata {:?}", String::from_utf8_lossy(&k)), e))?;
            out.push(self.load_env(meta, retention)?);
        }
        self.marks.check(&out.iter().map(|l| &l.meta).collect::<Vec<_>>())?;
        Ok(out)
    }

    fn load_env(&self, mut meta: EnvMeta, retention: Retention) -> Result<Loaded, StoreError> {
        meta.migrate_keys();
        let name = meta.name.clone();
        let mut items = BTreeMap::new();
        let (generation, tree) = self.items_tree(&name)?;
        // A commit that failed or crashed before it made its generation
        // current left it behind.
        let orphans = self.drop_generations(&name, Some(generation))?;
        if orphans > 0 {
            tracing::info!(env = %name, orphans, "dropped items trees of commits that did not complete");
        }
        for r in tree.iter() {
            let (k, v) = r?;
            let key = String::from_utf8(k[1..].to_vec())
                .map_err(|e| corrupt(format!("item key in {name:?}"), e))?;
            let kind = match k.first() {
                Some(1) => Kind::Flag,
                Some(2) => Kind::Segment,
                _ => {
                    return Err(corrupt(
                        format!("item {key:?} in environment {name:?}"),
                        std::io::Error::other("unknown item kind byte"),
                    ));
                }
            };
            // The value sled read, not a copy: sled keeps the pages it
            // read in its cache (beyond `sled-cache-bytes`: 43 of 50 MiB
            // of items after loading 50,000 flags), so a copy would hold
            // the environment twice.
            items.insert((kind, key), Bytes::from_owner(v));
        }
        let log_tree = self.db.open_tree(format!("log/{name}"))?;
        let mut log = Log::new();
        for r in log_tree.iter() {
            let (_, v) = r?;
            let e: LogEntry =
                serde_json::from_slice(&v).map_err(|e| corrupt(format!("change log of {name:?}"), e))?;
            log.push_back(std::sync::Arc::new(e));
        }
        // Only entries up to the committed head count (a later one cannot
        // exist with atomic commits, but never trust more than meta says).
        log.retain(|e| e.revision <= meta.revision);
        // Retention may have been lowered since: drop the excess on disk too.
        for revision in trim_log(&mut log, retention) {
            log_tree.remove(revision.to_be_bytes())?;
        }
        let audit_trimmed = match retention.audit_floor(meta.revision) {
            Some(floor) => {
                let tree = self.db.open_tree(format!("audit/{name}"))?;
                let expired = expired(&tree, floor)?;
                for k in &expired {
                    tree.remove(k)?;
                }
                expired.len()
            }
            None => 0,
        };
        Ok(Loaded { meta, items, log, audit_trimmed })
    }

    fn commit_now(&self, c: Commit) -> Result<Committed, StoreError> {
        let name = c.meta.name.clone();
        let (generation, mut items) = self.items_tree(&name)?;
        // Many items: a new generation, written in batches before the
        // transaction makes it current (see `generation.rs`).
        let next = (c.items.len() >= BULK_ITEMS).then_some(generation + 1);
        if let Some(next) = next {
            items = self.write_generation(&name, &items, next, &c.items)?;
            self.db.flush()?;
        }
        let log = self.db.open_tree(format!("log/{name}"))?;
        let audit = self.db.open_tree(format!("audit/{name}"))?;
        // Audit records past the retention: normally one revision's worth.
        let expired = match c.audit_floor {
            Some(floor) => expired(&audit, floor)?,
            None => Vec::new(),
        };
        let old_log: Vec<sled::IVec> =
            if c.reset_log { log.iter().keys().collect::<Result<_, _>>()? } else { Vec::new() };
        let entry_json = c.entry.as_ref().map(|e| to_json("change-log entry", e)).transpose()?;
        let meta_json = to_json("environment metadata", &c.meta)?;
        (&self.meta, &items, &log, &audit)
            .transaction(|(m, i, l, a)| {
                // A new generation holds the items already: the
                // transaction only makes it current.
                let in_place = match next {
                    Some(next) => {
                        m.insert(gen_key(&name).as_bytes(), &next.to_be_bytes())?;
                        None
                    }
                    None => Some(c.items.iter()),
                };
                for change in in_place.into_iter().flatten() {
                    match change.stored_value() {
                        Some(v) => i.insert(item_key(change.key), v)?,
                        None => i.remove(item_key(change.key))?,
                    };
                }
                for k in &old_log {
                    l.remove(k)?;
                }
                if let (Some(entry), Some(json)) = (&c.entry, &entry_json) {
                    l.insert(&entry.revision.to_be_bytes(), json.as_slice())?;
                }
                for r in &c.trimmed {
                    l.remove(&r.to_be_bytes())?;
                }
                // Each record encoded as it is inserted, not all of them
                // first: sled copies the value, so a batch's encodings are
                // not held twice (a 1,000-flag write's are ~3 MiB).
                for (pos, rec) in &c.audit {
                    let json = to_json("audit record", rec).map_err(ConflictableTransactionError::Abort)?;
                    a.insert(key_of(*pos).as_slice(), json.as_slice())?;
                }
                for k in &expired {
                    a.remove(k)?;
                }
                m.insert(meta_key(&name).as_bytes(), meta_json.as_slice())?;
                Ok::<(), ConflictableTransactionError<StoreError>>(())
            })
            .map_err(abort_to_store)?;
        // Durable before anyone is told.
        self.db.flush()?;
        self.marks.set(&name, &c.meta.epoch, c.meta.revision);
        if next.is_some() {
            // Committed: the old generation goes (or, if this fails, at the
            // environment's next load).
            if let Err(e) = self.drop_generations(&name, next) {
                tracing::warn!(env = %name, error = %e, "dropping the previous items tree failed; it is dropped at the next start");
            }
        }
        Ok(Committed { audit_trimmed: expired.len() })
    }
}

/// The next free position at `revision` of an audit tree.
fn next_pos(audit: &sled::Tree, env: &str, revision: u64) -> Result<AuditPos, StoreError> {
    let (from, to) = (key_of((revision, 0)), key_of((revision, u32::MAX)));
    match audit.range(from.as_slice()..=to.as_slice()).next_back() {
        Some(r) => {
            let (_, seq) = pos_of(env, &r?.0)?;
            let next = seq.checked_add(1).ok_or_else(|| {
                corrupt(
                    format!("audit log of {env:?}"),
                    std::io::Error::other("no position left in the revision"),
                )
            })?;
            Ok((revision, next))
        }
        None => Ok((revision, 0)),
    }
}

fn abort_to_store(e: TransactionError<StoreError>) -> StoreError {
    match e {
        TransactionError::Storage(e) => StoreError::from(e),
        TransactionError::Abort(e) => e,
    }
}

impl SledBackend {
    /// Stores `meta` and, when given, `record` at the next position of its
    /// revision, in one transaction; flushed.
    fn put_meta_audited(&self, meta: &EnvMeta, record: Option<&AuditRecord>) -> Result<(), StoreError> {
        let Some(rec) = record else {
            self.put_meta_now(meta)?;
            return Ok(self.db.flush().map(|_| ())?);
        };
        let audit = self.db.open_tree(format!("audit/{}", meta.name))?;
        let pos = next_pos(&audit, &meta.name, rec.revision)?;
        let (key, json) = (key_of(pos), to_json("audit record", rec)?);
        let meta_json = to_json("environment metadata", meta)?;
        (&self.meta, &audit)
            .transaction(|(m, a)| {
                a.insert(key.as_slice(), json.as_slice())?;
                m.insert(meta_key(&meta.name).as_bytes(), meta_json.as_slice())?;
                Ok::<(), ConflictableTransactionError<StoreError>>(())
            })
            .map_err(abort_to_store)?;
        self.db.flush()?;
        Ok(())
    }

    /// Keeps `name`'s audit records under `archive`, with `record` (its
    /// deletion, sealed) last and its hash as the archive's head; then
    /// removes the environment.
    fn archive_now(&self, name: &str, archive: &str, mut record: AuditRecord) -> Result<(), StoreError> {
        let Some(stored) = self.meta.get(meta_key(name))? else {
            return Err(StoreError::EnvNotFound(name.to_owned()));
        };
        let meta: EnvMeta =
            serde_json::from_slice(&stored).map_err(|e| corrupt(format!("metadata {name:?}"), e))?;
        let mut head = meta.audit_head.clone();
        super::audit::seal_onto(&mut record, meta.revision, &mut head)?;
        let from = self.db.open_tree(format!("audit/{name}"))?;
        let to = self.db.open_tree(format!("audit/{archive}"))?;
        // Copied first (a crash here leaves the environment as it was and
        // an archive without a head, overwritten by the next attempt).
        for r in from.iter() {
            let (k, v) = r?;
            to.insert(k, v)?;
        }
        let pos = next_pos(&to, archive, record.revision)?;
        let (key, json) = (key_of(pos), to_json("audit record", &record)?);
        let head = to_json(
            "archived chain head",
            &ArchiveHead { revision: record.revision, head: record.hash.clone() },
        )?;
        (&self.meta, &to)
            .transaction(|(m, a)| {
                a.insert(key.as_slice(), json.as_slice())?;
                m.insert(format!("{ARCHIVE_PREFIX}{archive}").as_bytes(), head.as_slice())?;
                m.remove(meta_key(name).as_bytes())?;
                Ok::<(), ConflictableTransactionError<StoreError>>(())
            })
            .map_err(abort_to_store)?;
        Ok(())
    }
}

fn meta_key(name: &str) -> String {
    format!("env/{name}")
}

fn item_key(key: &ItemKey) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.1.len() + 1);
    k.push(key.0 as u8);
    k.extend_from_slice(key.1.as_bytes());
    k
}

fn key_of(pos: AuditPos) -> Vec<u8> {
    let mut k = pos.0.to_be_bytes().to_vec();
    k.extend_from_slice(&pos.1.to_be_bytes());
    k
}

fn pos_of(env: &str, k: &[u8]) -> Result<AuditPos, StoreError> {
    match (k.get(..8).map(<[u8; 8]>::try_from), k.get(8..12).map(<[u8; 4]>::try_from)) {
        (Some(Ok(rev)), Some(Ok(seq))) => Ok((u64::from_be_bytes(rev), u32::from_be_bytes(seq))),
        _ => Err(corrupt(format!("audit key in {env:?}"), std::io::Error::other("short key"))),
    }
}

/// Keys of the audit records of revisions up to `floor`.
fn expired(audit: &sled::Tree, floor: u64) -> Result<Vec<sled::IVec>, StoreError> {
    let end = floor.saturating_add(1).to_be_bytes();
    Ok(audit.range(..end.as_slice()).keys().collect::<Result<_, _>>()?)
}

#[async_trait]
impl Backend for SledBackend {
    async fn load(&self, retention: Retention) -> Result<Vec<Loaded>, StoreError> {
        self.run(move |b| b.load_now(retention)).await
    }

    async fn create_env(&self, meta: EnvMeta, audit: Option<AuditRecord>) -> Result<(), StoreError> {
        self.run(move |b| {
            b.put_meta_audited(&meta, audit.as_ref())?;
            b.marks.set(&meta.name, &meta.epoch, meta.revision);
            Ok(())
        })
        .await
    }

    async fn delete_env(
        &self,
        name: String,
        archive: Option<(String, AuditRecord)>,
    ) -> Result<(), StoreError> {
        self.run(move |b| {
            // Unmarked durably first: a deletion is never taken for a loss.
            b.marks.remove(&name)?;
            match &archive {
                Some((id, record)) => b.archive_now(&name, id, record.clone())?,
                None => {
                    b.meta.remove(meta_key(&name))?;
                }
            }
            for prefix in ["log", "audit"] {
                b.db.drop_tree(format!("{prefix}/{name}"))?;
            }
            b.drop_generations(&name, None)?;
            b.meta.remove(gen_key(&name))?;
            b.db.flush()?;
            Ok(())
        })
        .await
    }

    async fn update_meta(
        &self,
        current: EnvMeta,
        mut change: super::backend::MetaChange,
    ) -> Result<EnvMeta, StoreError> {
        // One writer: what this relay holds is the record.
        let mut meta = current;
        let record = change(&mut meta)?;
        self.run(move |b| {
            b.put_meta_audited(&meta, record.as_ref())?;
            Ok(meta)
        })
        .await
    }

    async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        self.run(move |b| b.commit_now(commit)).await
    }

    async fn audit(
        &self,
        env: String,
        item: Option<(Kind, String)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
        self.run(move |b| {
            let tree = b.db.open_tree(format!("audit/{env}"))?;
            let upper = key_of(before.unwrap_or((u64::MAX, u32::MAX)));
            let mut out = Vec::new();
            for r in tree.range(..upper.as_slice()).rev() {
                let (k, v) = r?;
                let rec: AuditRecord =
                    serde_json::from_slice(&v).map_err(|e| corrupt(format!("audit log of {env:?}"), e))?;
                let pos = pos_of(&env, &k)?;
                if item.as_ref().is_none_or(|(k, name)| rec.kind == Some(*k) && rec.key == *name) {
                    out.push((pos, rec));
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok(out)
        })
        .await
    }

    async fn audit_page(
        &self,
        env: String,
        after: Option<AuditPos>,
        upto: AuditPos,
        limit: usize,
    ) -> Result<AuditRows, StoreError> {
        self.run(move |b| {
            let tree = b.db.open_tree(format!("audit/{env}"))?;
            let end = key_of(upto);
            let range = match after {
                Some(p) => tree.range((std::ops::Bound::Excluded(key_of(p)), std::ops::Bound::Included(end))),
                None => tree.range(..=end),
            };
            let mut out = Vec::new();
            for r in range.take(limit) {
                let (k, v) = r?;
                let pos = pos_of(&env, &k)?;
                out.push((pos, serde_json::from_slice::<AuditRecord>(&v).map_err(|e| e.to_string())));
            }
            Ok(out)
        })
        .await
    }

    async fn append_relay_audit(&self, record: AuditRecord) -> Result<AuditRecord, StoreError> {
        self.run(move |b| {
            let chain = super::audit::RELAY_CHAIN;
            let tree = b.db.open_tree(format!("audit/{chain}"))?;
            let head_key = format!("{ARCHIVE_PREFIX}{chain}");
            // sled transactions are serialisable: concurrent appends retry,
            // and the record and the head are stored together.
            let sealed = (&b.meta, &tree)
                .transaction(|(m, a)| {
                    let (revision, mut head) = match m.get(head_key.as_bytes())? {
                        Some(v) => match serde_json::from_slice::<ArchiveHead>(&v) {
                            Ok(h) => (h.revision, h.head),
                            Err(e) => {
                                return Err(ConflictableTransactionError::Abort(corrupt(
                                    "the relay's audit chain head".into(),
                                    e,
                                )));
                            }
                        },
                        None => (0, String::new()),
                    };
                    let mut rec = record.clone();
                    let next = revision + 1;
                    super::audit::seal_onto(&mut rec, next, &mut head)
                        .map_err(ConflictableTransactionError::Abort)?;
                    let json = to_json("audit record", &rec).map_err(ConflictableTransactionError::Abort)?;
                    let h = to_json("the relay's audit chain head", &ArchiveHead { revision: next, head })
                        .map_err(ConflictableTransactionError::Abort)?;
                    a.insert(key_of((next, 0)), json)?;
                    m.insert(head_key.as_bytes(), h)?;
                    Ok(rec)
                })
                .map_err(abort_to_store)?;
            b.db.flush()?;
            Ok(sealed)
        })
        .await
    }

    async fn archive_head(&self, archive: String) -> Result<Option<(u64, String)>, StoreError> {
        self.run(move |b| {
            let Some(v) = b.meta.get(format!("{ARCHIVE_PREFIX}{archive}"))? else { return Ok(None) };
            let h: ArchiveHead = serde_json::from_slice(&v)
                .map_err(|e| corrupt(format!("archived audit head {archive:?}"), e))?;
            Ok(Some((h.revision, h.head)))
        })
        .await
    }

    async fn last_actor(&self, env: String, kind: Kind, key: String) -> Option<String> {
        // Only used to enrich a conflict message: a read failure leaves it
        // without the "last changed by" part.
        self.run(move |b| {
            let tree = b.db.open_tree(format!("audit/{env}"))?;
            Ok(tree.iter().rev().take(10_000).filter_map(Result::ok).find_map(|(_, v)| {
                let r: AuditRecord = serde_json::from_slice(&v).ok()?;
                (r.kind == Some(kind) && r.key == key)
                    .then(|| format!("{} at revision {}", r.actor, r.revision))
            }))
        })
        .await
        .ok()
        .flatten()
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        self.run(|b| {
            let mut out = Vec::new();
            for r in b.meta.scan_prefix(TOKEN_PREFIX) {
                let (k, v) = r?;
                let name = String::from_utf8_lossy(&k[TOKEN_PREFIX.len()..]).into_owned();
                out.push(serde_json::from_slice(&v).map_err(|e| corrupt(format!("token {name:?}"), e))?);
            }
            if out.is_empty()
                && let Some(hash) = b.meta.get(LEGACY_TOKEN_KEY)?
            {
                // The one admin token of a store from before named tokens.
                out.push(TokenRecord {
                    name: BOOTSTRAP.into(),
                    role: Role::Admin,
                    environments: vec![],
                    replicate: false,
                    hash: String::from_utf8_lossy(&hash).into_owned(),
                    created_unix_ms: super::now_ms(),
                    created_by: "relay".into(),
                });
            }
            Ok(out)
        })
        .await
    }

    async fn put_token(&self, token: TokenRecord) -> Result<(), StoreError> {
        self.run(move |b| {
            let json = to_json("token", &token)?;
            b.meta.insert(format!("{TOKEN_PREFIX}{}", token.name), json)?;
            b.meta.remove(LEGACY_TOKEN_KEY)?;
            b.db.flush()?;
            Ok(())
        })
        .await
    }

    async fn insert_token(&self, token: TokenRecord) -> Result<bool, StoreError> {
        self.run(move |b| {
            let key = format!("{TOKEN_PREFIX}{}", token.name);
            let json = to_json("token", &token)?;
            let inserted = b.meta.compare_and_swap(key, None as Option<&[u8]>, Some(json))?.is_ok();
            b.meta.remove(LEGACY_TOKEN_KEY)?;
            b.db.flush()?;
            Ok(inserted)
        })
        .await
    }

    async fn remove_token(&self, name: String) -> Result<(), StoreError> {
        self.run(move |b| {
            b.meta.remove(format!("{TOKEN_PREFIX}{name}"))?;
            b.db.flush()?;
            Ok(())
        })
        .await
    }

    async fn revoke_token(&self, name: String) -> Result<Revoked, StoreError> {
        // One relay holds a sled store (sled locks it) and `Tokens`
        // serialises its changes: the check and the removal cannot
        // interleave with another change.
        let decision = crate::store::token::revocation(&self.tokens().await?, &name);
        if decision == Revoked::Done {
            self.remove_token(name).await?;
        }
        Ok(decision)
    }

    async fn setting(&self, name: &'static str) -> Result<Option<String>, StoreError> {
        self.run(move |b| {
            Ok(b.meta
                .get(format!("{SETTING_PREFIX}{name}"))?
                .map(|v| String::from_utf8_lossy(&v).into_owned()))
        })
        .await
    }

    async fn put_setting(&self, name: &'static str, value: String) -> Result<(), StoreError> {
        self.run(move |b| {
            b.meta.insert(format!("{SETTING_PREFIX}{name}"), value.as_bytes())?;
            b.db.flush()?;
            Ok(())
        })
        .await
    }

    async fn flush(&self) -> Result<(), StoreError> {
        self.db.flush_async().await?;
        // Files sled made since it opened (snapshots, blobs) are out of
        // reach in the 0700 directory already; 0600 as well from now on.
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || crate::ops::permission::make_private(&dir))
            .await
            .map_err(StoreError::Task)?
            .map_err(sled::Error::Io)?;
        Ok(())
    }
}
