//! The store boundary: what the relay asks of the database that holds its
//! environments, in the relay's own terms (environments, items, revisions,
//! the change log, audit records, tokens), never in a database's.
//!
//! [`Store`](super::Store) keeps every environment in memory and decides
//! what a write or a received revision changes; a [`Backend`] makes that
//! durable, atomically per revision, and reads it back at start. The
//! embedded sled backend (`sled.rs`) is the default. Nothing above the
//! store (Subscribe, Admin, limits, metrics) knows which backend runs.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::audit::{AuditPos, AuditRecord};
use super::meta::EnvMeta;
use super::state::{ItemKey, Items, Kind, Log, LogEntry};
use super::{Retention, StoreError};
pub(crate) use crate::store::token::Revoked;
use crate::store::token::TokenRecord;

/// One item a revision writes: its new bytes, or `None` for a delete.
#[derive(Debug, Clone)]
pub(crate) struct ItemChange {
    /// Which item.
    pub key: ItemKey,
    /// The canonical encoding after the revision; `None`: deleted.
    pub bytes: Option<Bytes>,
    /// The buffer `bytes` reads, when the write made it with
    /// [`shared_encoding`]: the embedded backend stores it as it is, so the
    /// item is held once, not by the state and again in sled's cache.
    /// `None`: a backend copies `bytes`.
    pub shared: Option<sled::IVec>,
}

/// The items a revision writes.
#[derive(Debug, Clone)]
pub(crate) enum Changes {
    /// These, in order.
    Listed(Vec<ItemChange>),
    /// Every item of `items` upserted, none deleted: a revision replacing
    /// an environment that held no items (a replica's first sync). The map
    /// the new state keeps, not a list made from it: a list cost ~100
    /// bytes an item (2 MiB at 20,000 flags) at the replica's peak, the
    /// commit (docs/RESILIENCE.md §5).
    Whole {
        /// The items, in key order.
        items: Items,
        /// The buffers they read, where made with [`shared_encoding`].
        shared: Arc<SharedBuffers>,
    },
}

/// One item a revision writes, as a backend reads it from [`Changes`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChangeRef<'a> {
    /// Which item.
    pub key: &'a ItemKey,
    /// As [`ItemChange::bytes`].
    pub bytes: Option<&'a Bytes>,
    /// As [`ItemChange::shared`].
    pub shared: Option<&'a sled::IVec>,
}

impl ChangeRef<'_> {
    /// What the embedded backend stores: the state's own buffer where the
    /// change shares it (held once, in both), else a copy of its bytes;
    /// `None`: a delete.
    pub(crate) fn stored_value(self) -> Option<sled::IVec> {
        debug_assert!(
            self.shared.zip(self.bytes).is_none_or(|(s, b)| s == b.as_ref()),
            "a shared buffer holds its item's bytes"
        );
        match (self.shared, self.bytes) {
            (Some(shared), Some(_)) => Some(shared.clone()),
            (_, Some(b)) => Some(sled::IVec::from(b.as_ref())),
            (_, None) => None,
        }
    }
}

impl Changes {
    /// How many items it writes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Changes::Listed(l) => l.len(),
            Changes::Whole { items, .. } => items.len(),
        }
    }

    /// Each item it writes, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = ChangeRef<'_>> {
        let (listed, whole) = match self {
            Changes::Listed(l) => (Some(l), None),
            Changes::Whole { items, shared } => (None, Some((items, shared))),
        };
        let listed = listed.into_iter().flatten().map(|c| ChangeRef {
            key: &c.key,
            bytes: c.bytes.as_ref(),
            shared: c.shared.as_ref(),
        });
        let whole = whole.into_iter().flat_map(|(items, shared)| {
            items.iter().map(|(key, i)| ChangeRef { key, bytes: Some(&i.bytes), shared: shared.of(&i.bytes) })
        });
        listed.chain(whole)
    }
}

impl From<Vec<ItemChange>> for Changes {
    fn from(l: Vec<ItemChange>) -> Changes {
        Changes::Listed(l)
    }
}

/// Buffers made by [`shared_encoding`], each found by the address of the
/// bytes that read it: a pointer and a buffer handle per item, sorted once.
#[derive(Debug)]
pub(crate) struct SharedBuffers(Vec<(usize, sled::IVec)>);

impl SharedBuffers {
    /// `made`: each buffer with the address its `Bytes` reads.
    pub(crate) fn new(mut made: Vec<(usize, sled::IVec)>) -> SharedBuffers {
        made.sort_unstable_by_key(|(at, _)| *at);
        SharedBuffers(made)
    }

    /// The buffer `bytes` reads. Only one holding the item's own bytes:
    /// should two entries ever share an address, the item is copied by the
    /// backend, never given another's.
    pub(crate) fn of(&self, bytes: &Bytes) -> Option<&sled::IVec> {
        let at = bytes.as_ptr() as usize;
        let i = self.0.binary_search_by_key(&at, |(a, _)| *a).ok()?;
        let found = &self.0[i].1;
        // The same allocation and length: its own buffer, no bytes to
        // compare (a first sync reads every item's this way, three times).
        // Otherwise (sled keeps values of up to 22 bytes inline, so a
        // small item's buffer is a copy) the bytes decide.
        let own = found.as_ptr() == bytes.as_ptr() && found.len() == bytes.len();
        (own || found == bytes.as_ref()).then_some(found)
    }
}

/// An item's encoding in one buffer for the relay's state (the `Bytes`)
/// and the embedded backend (the `IVec`, which sled stores and caches
/// without a copy). sled keeps what it writes in its page cache, whatever
/// `sled-cache-bytes` says: with a copy, an environment written whole was
/// held twice.
pub(crate) fn shared_encoding(encoding: &[u8]) -> (Bytes, sled::IVec) {
    let stored = sled::IVec::from(encoding);
    (Bytes::from_owner(stored.clone()), stored)
}

/// One revision to make durable, whole or not at all.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    /// The environment's metadata after the revision (head revision,
    /// checksum, commit time, epoch, audit chain head).
    pub meta: EnvMeta,
    /// The head revision the revision was planned on. A backend shared by
    /// several writers refuses the commit with [`StoreError::Behind`] when
    /// its head moved past it; the embedded backend has one writer.
    pub base: u64,
    /// The items it changes.
    pub items: Changes,
    /// Its change-log entry; `None` when the log restarts empty at this
    /// revision (`reset_log`).
    pub entry: Option<LogEntry>,
    /// Change-log revisions that retention drops with this commit.
    pub trimmed: Vec<u64>,
    /// Drop the whole change log first (an epoch change: the old history
    /// means nothing in the new epoch).
    pub reset_log: bool,
    /// Its audit records, already sealed onto the chain (none for
    /// revisions received from an upstream relay).
    pub audit: Vec<(AuditPos, AuditRecord)>,
    /// Audit records of revisions up to this one are dropped (retention).
    pub audit_floor: Option<u64>,
    /// Random, one per write: a shared backend records it with the
    /// revision, so a commit whose outcome a dropped connection hid is
    /// looked up instead of guessed (and a retry is idempotent).
    pub request_id: String,
}

/// A change to an environment's metadata (SDK keys, description),
/// applied by the backend to the metadata it holds: a shared backend
/// applies it to the database's current record under its lock, so two
/// relays changing keys at once lose neither change. It may return an
/// audit record sealed onto the metadata's chain (an SDK key event): the
/// backend stores it with the metadata, atomically, at the metadata's
/// revision after the records already there.
pub(crate) type MetaChange = Box<dyn FnMut(&mut EnvMeta) -> Result<Option<AuditRecord>, StoreError> + Send>;

/// Rows of an audit page: a position and its record (or why it does not
/// decode).
pub(crate) type AuditRows = Vec<(AuditPos, Result<AuditRecord, String>)>;

/// What [`Backend::commit`] did beyond the commit itself.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Committed {
    /// Audit records dropped for the retention.
    pub audit_trimmed: usize,
}

/// One environment as stored.
#[derive(Debug)]
pub(crate) struct Loaded {
    /// Its metadata.
    pub meta: EnvMeta,
    /// Every live item's bytes.
    pub items: BTreeMap<ItemKey, Bytes>,
    /// The retained change log, oldest first, after retention.
    pub log: Log,
    /// Audit records dropped at load for the retention.
    pub audit_trimmed: usize,
}

/// A write holding a shared database's lock on one environment, so the
/// write is planned on exactly the state it will replace and writers of one
/// environment (at any relay) queue instead of racing. Dropped without
/// `commit`, it is rolled back.
#[async_trait]
pub(crate) trait WriteLock: Send {
    /// The database's head of the environment: epoch and revision.
    fn head(&self) -> (&str, u64);

    /// The audit chain's head at [`WriteLock::head`]: the next audit
    /// record chains onto it, whichever relay wrote the last one.
    fn audit_head(&self) -> &str;

    /// Commits `commit` (planned on [`WriteLock::head`]) and releases the
    /// lock.
    async fn commit(self: Box<Self>, commit: Commit) -> Result<Committed, StoreError>;
}

/// The durable side of the store. Every method completes or fails whole;
/// none is called for one environment by two writers at once (the store
/// serialises them).
#[async_trait]
pub(crate) trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// Every environment, with retention applied (dropping what it no
    /// longer keeps).
    async fn load(&self, retention: Retention) -> Result<Vec<Loaded>, StoreError>;

    /// Stores a new environment with no items and, when given, its first
    /// audit record (at position `(0, 0)`, already sealed: `meta` holds its
    /// hash as the chain's head).
    async fn create_env(&self, meta: EnvMeta, audit: Option<AuditRecord>) -> Result<(), StoreError>;

    /// Removes an environment and everything it holds. With `archive`
    /// (a name no environment can have, and the deletion's audit record,
    /// unsealed) its audit records are kept under that name, the deletion's
    /// record last, sealed onto the stored chain at the stored head
    /// revision, its hash the archived chain's head
    /// ([`Backend::archive_head`]).
    async fn delete_env(
        &self,
        name: String,
        archive: Option<(String, AuditRecord)>,
    ) -> Result<(), StoreError>;

    /// The head of an archived chain (a deleted environment's) or of the
    /// relay's chain (`audit::RELAY_CHAIN`): its last revision and hash;
    /// `None` when there is no such chain.
    async fn archive_head(&self, archive: String) -> Result<Option<(u64, String)>, StoreError>;

    /// Appends `record` (unsealed) to the relay's chain: sealed onto its
    /// head at the next revision (position `(n, 0)`), stored with the new
    /// head atomically; returns it sealed.
    async fn append_relay_audit(&self, record: AuditRecord) -> Result<AuditRecord, StoreError>;

    /// Whether other relays write to the same database (every relay of a
    /// PostgreSQL deployment). Then a revision this relay learns of from
    /// the database's change feed is already durable, and a commit may
    /// find the head moved ([`StoreError::Behind`]).
    fn shared(&self) -> bool {
        false
    }

    /// Changes an environment's metadata (SDK keys, description) with
    /// `change`, applied to `current` (what this relay holds) or, in a
    /// shared database, to the stored record; returns the result.
    async fn update_meta(&self, current: EnvMeta, change: MetaChange) -> Result<EnvMeta, StoreError>;

    /// Makes one revision durable, atomically: items, change log, audit
    /// records and metadata together.
    async fn commit(&self, commit: Commit) -> Result<Committed, StoreError>;

    /// A shared database: locks `env` for a write and returns the lock
    /// with the database's head (the store catches up to it, plans, and
    /// commits through it). `None`: this backend has one writer, plan on
    /// memory and [`Backend::commit`].
    async fn lock_for_write(&self, _env: &str) -> Result<Option<Box<dyn WriteLock>>, StoreError> {
        Ok(None)
    }

    /// Audit records of `env`, newest first, optionally of one item, before
    /// a position.
    async fn audit(
        &self,
        env: String,
        item: Option<(Kind, String)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError>;

    /// At most `limit` audit records of `env` (or an archive), oldest
    /// first, after `after` (`None`: from the first) and at or before
    /// `upto`: one page of a chain walk.
    async fn audit_page(
        &self,
        env: String,
        after: Option<AuditPos>,
        upto: AuditPos,
        limit: usize,
    ) -> Result<AuditRows, StoreError>;

    /// Who last changed an item and at which revision, from the audit log
    /// (for conflict messages; `None` when unknown).
    async fn last_actor(&self, env: String, kind: Kind, key: String) -> Option<String>;

    /// Every admin token record.
    async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError>;

    /// Stores (creates or replaces) a token record.
    async fn put_token(&self, token: TokenRecord) -> Result<(), StoreError>;

    /// Stores a token record unless one of that name exists; whether it
    /// did.
    async fn insert_token(&self, token: TokenRecord) -> Result<bool, StoreError>;

    /// Removes a token record.
    async fn remove_token(&self, name: String) -> Result<(), StoreError>;

    /// Removes token `name` unless it is the last admin token for all
    /// environments ([`crate::store::token::revocation`] on what is stored),
    /// check and removal as one step: on a shared database no two relays
    /// can each remove one of the last two.
    async fn revoke_token(&self, name: String) -> Result<Revoked, StoreError>;

    /// A small named setting of the store (e.g. its role), if set.
    async fn setting(&self, name: &'static str) -> Result<Option<String>, StoreError>;

    /// Stores a setting.
    async fn put_setting(&self, name: &'static str, value: String) -> Result<(), StoreError>;

    /// Makes everything written so far durable (shutdown).
    async fn flush(&self) -> Result<(), StoreError>;
}

/// For tests: `n` flags committed whole (`key(i)` → `value(i)`, in key
/// order when `key` sorts as `i` does), the even ones in a buffer of their
/// own ([`shared_encoding`]), the odd ones not.
#[cfg(test)]
pub(crate) fn whole_for_tests(
    n: usize,
    key: impl Fn(usize) -> String,
    value: impl Fn(usize) -> String,
) -> Changes {
    let (mut items, mut made) = (Items::new(), Vec::new());
    for i in 0..n {
        let bytes = match i % 2 {
            0 => {
                let (bytes, ivec) = shared_encoding(value(i).as_bytes());
                made.push((bytes.as_ptr() as usize, ivec));
                bytes
            }
            _ => Bytes::from(value(i)),
        };
        let key = key(i);
        items.insert((Kind::Flag, key.clone()), super::state::Item::new(Kind::Flag, &key, bytes, 1));
    }
    Changes::Whole { items, shared: Arc::new(SharedBuffers::new(made)) }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::{Changes, ItemChange, SharedBuffers, shared_encoding, whole_for_tests};
    use crate::store::state::Kind;

    /// A map committed whole reads each item's own buffer where one was
    /// made, and none (a copy) for the others; a listed change as given;
    /// and what the embedded backend stores is the buffer itself, or a
    /// copy of the bytes, or nothing for a delete.
    #[test]
    fn a_whole_map_reads_each_items_own_buffer() {
        // Longer than sled keeps inline in an `IVec` (22 bytes), so a
        // shared buffer is one allocation both read.
        let value = |i: usize| format!("the value of item {i} in the map");
        let whole = whole_for_tests(50, |i| format!("f{i:02}"), value);
        assert_eq!(whole.len(), 50);
        for (i, c) in whole.iter().enumerate() {
            assert_eq!(c.key, &(Kind::Flag, format!("f{i:02}")));
            let bytes = c.bytes.expect("an upsert");
            assert_eq!(bytes.as_ref(), value(i).as_bytes());
            match c.shared {
                Some(shared) => {
                    assert!(i % 2 == 0, "item {i} has no buffer of its own");
                    assert_eq!(shared.as_ptr(), bytes.as_ptr(), "item {i}: its own buffer");
                    assert_eq!(c.stored_value().unwrap().as_ptr(), bytes.as_ptr(), "stored as it is");
                }
                None => {
                    assert!(i % 2 == 1, "item {i}'s buffer not found");
                    let stored = c.stored_value().unwrap();
                    assert_eq!((stored.as_ref(), stored.as_ptr() == bytes.as_ptr()), (bytes.as_ref(), false));
                }
            }
        }
        let listed = Changes::from(vec![
            ItemChange { key: (Kind::Flag, "a".into()), bytes: Some(Bytes::from("x")), shared: None },
            ItemChange { key: (Kind::Segment, "s".into()), bytes: None, shared: None },
        ]);
        let got: Vec<_> = listed.iter().map(|c| (c.key.clone(), c.stored_value())).collect();
        assert_eq!(
            got,
            [((Kind::Flag, "a".into()), Some(sled::IVec::from("x"))), ((Kind::Segment, "s".into()), None)]
        );
    }

    /// A buffer is found from the bytes made with it, not from equal
    /// bytes held elsewhere (the backend copies those).
    #[test]
    fn a_shared_buffer_is_found_from_its_own_bytes_only() {
        let made: Vec<_> = (0..100).map(|i| shared_encoding(format!("item {i}").as_bytes())).collect();
        let buffers =
            SharedBuffers::new(made.iter().map(|(b, ivec)| (b.as_ptr() as usize, ivec.clone())).collect());
        for (bytes, ivec) in &made {
            assert_eq!(buffers.of(bytes), Some(ivec));
        }
        assert_eq!(buffers.of(&Bytes::from("item 7")), None, "equal bytes, another buffer");
        assert_eq!(buffers.of(&made[7].0.slice(1..)), None, "not at a buffer's start");
        assert_eq!(buffers.of(&made[7].0.slice(..3)), None, "at its start, not its bytes");
    }
}
