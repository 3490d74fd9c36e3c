//! The sled backend's transactions: one that refuses names what it could
//! not read, with the cause, and stores nothing.

use super::{ARCHIVE_PREFIX, SledBackend};
use crate::store::StoreError;
use crate::store::audit::{Access, RELAY_CHAIN, Who, access_record};
use crate::store::backend::Backend;

/// A garbled head of the relay's own audit chain: the append is refused
/// naming the head and keeping the decoder's error, and the chain keeps
/// the one record it had.
#[tokio::test]
async fn an_unreadable_relay_chain_head_is_refused_by_name_and_nothing_is_appended() {
    let dir = tempfile::tempdir().unwrap();
    let b = SledBackend::open(&dir.path().join("db")).unwrap();
    let record = access_record(Access::TokenCreate, "ci", String::new(), &Who::relay("test"));
    assert_eq!(b.append_relay_audit(record.clone()).await.unwrap().revision, 1);
    b.meta.insert(format!("{ARCHIVE_PREFIX}{RELAY_CHAIN}").as_bytes(), b"{not json".as_slice()).unwrap();
    let err = b.append_relay_audit(record).await.unwrap_err();
    match &err {
        StoreError::Corrupt { what, source } => {
            assert_eq!(what, "the relay's audit chain head");
            assert!(source.to_string().contains("key must be a string"), "the decoder's cause: {source}");
        }
        other => panic!("refused as corrupt, not {other:?}"),
    }
    let chain = b.db.open_tree(format!("audit/{RELAY_CHAIN}")).unwrap();
    assert_eq!(chain.len(), 1, "nothing appended");
}
