//! The chain check: blanked hashes, records before the chain, and a walk
//! that holds no write back (a real sled store behind a backend that
//! pauses the walk between pages).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use flagstream::Flag;

use super::*;
use crate::ops::metrics::Metrics;
use crate::store::backend::{AuditRows, Backend, Commit, Committed, Loaded, MetaChange, Revoked, WriteLock};
use crate::store::meta::EnvMeta;
use crate::store::sled::SledBackend;
use crate::store::{Op, Retention, Source, Store};

fn chain(n: usize) -> Vec<(AuditPos, AuditRecord)> {
    let mut head = String::new();
    (0..n)
        .map(|i| {
            let mut rec =
                access_record(Access::SdkKeyCreate, &format!("k{i}"), String::new(), &Who::relay("t"));
            seal_onto(&mut rec, i as u64, &mut head).unwrap();
            ((i as u64, 0), rec)
        })
        .collect()
}

fn check(records: &[(AuditPos, AuditRecord)], head: &str) -> Verification {
    verify(records.iter().cloned().map(|(p, r)| Ok((p, Ok(r)))), head).unwrap()
}

#[test]
fn an_intact_chain_holds_and_every_edit_breaks_it() {
    let records = chain(5);
    let head = records[4].1.hash.clone();
    assert_eq!(check(&records, &head), Verification { checked: 5, broken: None });
    let mut edited = records.clone();
    edited[2].1.actor = "someone-else".into();
    assert_eq!(check(&edited, &head).broken.unwrap().0, (2, 0));
}

/// The old check skipped a record without a hash and restarted the chain
/// after it, so an edited record with its hash blanked passed.
#[test]
fn a_blanked_hash_is_a_break_wherever_it_is() {
    let records = chain(5);
    let head = records[4].1.hash.clone();
    for i in 0..5 {
        let mut edited = records.clone();
        edited[i].1.actor = "someone-else".into();
        edited[i].1.hash.clear();
        let v = check(&edited, &head);
        let (pos, why) = v.broken.unwrap_or_else(|| panic!("blanking record {i} went unnoticed"));
        // The first record's blanking shows at the next one (it links to a
        // hash that the records before it do not have); the newest one's
        // at the end (the head is no longer reached).
        let at = if i == 0 { 1 } else { i };
        assert_eq!(pos, (at as u64, 0), "record {i}: {why}");
    }
}

#[test]
fn records_from_before_the_chain_may_only_come_first() {
    let mut records = chain(3);
    let legacy = |rev: u64| {
        let mut r = records[0].1.clone();
        r.revision = rev;
        r.prev_hash.clear();
        r.hash.clear();
        ((rev, 0), r)
    };
    let (a, b) = (legacy(0), legacy(1));
    // Re-number the chained records after two legacy ones; the first
    // chained record starts the chain (empty prev_hash): it holds.
    let mut head = String::new();
    for (i, (pos, rec)) in records.iter_mut().enumerate() {
        *pos = (i as u64 + 2, 0);
        rec.revision = pos.0;
        seal_onto(rec, pos.0, &mut head).unwrap();
    }
    let mut all = vec![a, b];
    all.extend(records);
    assert_eq!(check(&all, &head), Verification { checked: 3, broken: None });
}

/// A backend over a real sled store whose audit pages wait, from the
/// second page on, until the test lets them go.
#[derive(Debug)]
struct Paused {
    inner: SledBackend,
    pages: AtomicUsize,
    reached: tokio::sync::Notify,
    go: tokio::sync::Semaphore,
}

#[async_trait]
impl Backend for Paused {
    async fn load(&self, retention: Retention) -> Result<Vec<Loaded>, StoreError> {
        self.inner.load(retention).await
    }
    async fn create_env(&self, meta: EnvMeta, audit: Option<AuditRecord>) -> Result<(), StoreError> {
        self.inner.create_env(meta, audit).await
    }
    async fn delete_env(
        &self,
        name: String,
        archive: Option<(String, AuditRecord)>,
    ) -> Result<(), StoreError> {
        self.inner.delete_env(name, archive).await
    }
    async fn archive_head(&self, archive: String) -> Result<Option<(u64, String)>, StoreError> {
        self.inner.archive_head(archive).await
    }
    async fn append_relay_audit(&self, record: AuditRecord) -> Result<AuditRecord, StoreError> {
        self.inner.append_relay_audit(record).await
    }
    async fn update_meta(&self, current: EnvMeta, change: MetaChange) -> Result<EnvMeta, StoreError> {
        self.inner.update_meta(current, change).await
    }
    async fn revoke_token(&self, name: String) -> Result<Revoked, StoreError> {
        self.inner.revoke_token(name).await
    }
    async fn commit(&self, commit: Commit) -> Result<Committed, StoreError> {
        self.inner.commit(commit).await
    }
    async fn lock_for_write(&self, env: &str) -> Result<Option<Box<dyn WriteLock>>, StoreError> {
        self.inner.lock_for_write(env).await
    }
    async fn audit(
        &self,
        env: String,
        item: Option<(Kind, String)>,
        limit: usize,
        before: Option<AuditPos>,
    ) -> Result<Vec<(AuditPos, AuditRecord)>, StoreError> {
        self.inner.audit(env, item, limit, before).await
    }
    async fn audit_page(
        &self,
        env: String,
        after: Option<AuditPos>,
        upto: AuditPos,
        limit: usize,
    ) -> Result<AuditRows, StoreError> {
        if self.pages.fetch_add(1, Ordering::SeqCst) == 1 {
            self.reached.notify_one();
            let permit = self.go.acquire().await.map_err(|e| StoreError::Storage(Box::new(e)))?;
            permit.forget();
        }
        self.inner.audit_page(env, after, upto, limit).await
    }
    async fn last_actor(&self, env: String, kind: Kind, key: String) -> Option<String> {
        self.inner.last_actor(env, kind, key).await
    }
    async fn tokens(&self) -> Result<Vec<crate::store::token::TokenRecord>, StoreError> {
        self.inner.tokens().await
    }
    async fn put_token(&self, token: crate::store::token::TokenRecord) -> Result<(), StoreError> {
        self.inner.put_token(token).await
    }
    async fn insert_token(&self, token: crate::store::token::TokenRecord) -> Result<bool, StoreError> {
        self.inner.insert_token(token).await
    }
    async fn remove_token(&self, name: String) -> Result<(), StoreError> {
        self.inner.remove_token(name).await
    }
    async fn setting(&self, name: &'static str) -> Result<Option<String>, StoreError> {
        self.inner.setting(name).await
    }
    async fn put_setting(&self, name: &'static str, value: String) -> Result<(), StoreError> {
        self.inner.put_setting(name, value).await
    }
    async fn flush(&self) -> Result<(), StoreError> {
        self.inner.flush().await
    }
}

fn flag(key: &str) -> Op {
    let flag: Flag = serde_yaml_ng::from_str(&format!(
        "key: {key}\ntype: bool\nvariations: [true, false]\non: true\noff_variation: 1\nfallthrough: {{variation: 0}}\n"
    ))
    .unwrap();
    Op::PutFlag { flag, expected: None }
}

/// A verification in the middle of its walk (paused after its first page
/// of a 600-record log) holds no write back: a write and an SDK key
/// change complete, then the walk finishes and the chain holds, the
/// records written meanwhile left for the next check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verification_in_its_walk_holds_no_write_back() {
    let dir = tempfile::tempdir().unwrap();
    let backend = Arc::new(Paused {
        inner: SledBackend::open(&dir.path().join("db")).unwrap(),
        pages: AtomicUsize::new(0),
        reached: tokio::sync::Notify::new(),
        go: tokio::sync::Semaphore::new(0),
    });
    let retention = Retention { revisions: 1024, bytes: 8 << 20, audit_revisions: 100_000 };
    let store = Store::open(
        backend.clone(),
        flagstream::Limits::default(),
        retention,
        Metrics::new(),
        Source::Primary,
    )
    .await
    .unwrap();
    let who = Who::relay("t");
    store.create_env("e", "", &who).await.unwrap();
    store.write("e", (0..599).map(|i| flag(&format!("f{i}"))).collect(), None, &who, "").await.unwrap();

    let verifying = tokio::spawn({
        let store = store.clone();
        async move { store.verify_audit("e").await }
    });
    backend.reached.notified().await;
    // The walk is paused inside its second page: writes go on.
    store.write("e", vec![flag("during")], None, &who, "").await.unwrap();
    store.create_sdk_key("e", "during", false, &who).await.unwrap();
    assert!(!verifying.is_finished());
    backend.go.add_permits(1_000);
    let v = verifying.await.unwrap().unwrap();
    assert_eq!(v, Verification { checked: 600, broken: None });
    // The next check covers them.
    assert_eq!(store.verify_audit("e").await.unwrap(), Verification { checked: 602, broken: None });
}
