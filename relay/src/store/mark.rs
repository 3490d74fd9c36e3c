//! Commit marks: the newest committed revision of every environment, kept
//! in a small file next to the sled database (`commit-marks.json` in the
//! data directory). sled checks its log as it recovers and cuts a garbled
//! or truncated log back to the last consistent point, silently: the store
//! opens, its checksums match, and acknowledged writes are gone. The marks
//! turn that into a refusal to start that names the environment and both
//! revisions.
//!
//! Ordering keeps the marks from ever claiming more than sled holds: a
//! commit or a creation is marked after sled has flushed it, a deletion is
//! unmarked before sled drops it, and after a successful start the file is
//! rewritten from what was loaded. The file is replaced by rename, never
//! written in place; it is not fsynced, so after a power loss it can only
//! be behind sled, which is never reported.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::StoreError;
use super::meta::EnvMeta;

/// One environment's mark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Mark {
    epoch: String,
    revision: u64,
}

/// The file's content.
#[derive(Debug, Default, Serialize, Deserialize)]
struct MarkFile {
    environments: BTreeMap<String, Mark>,
}

/// The marks of one data directory.
#[derive(Debug)]
pub(crate) struct Marks {
    path: PathBuf,
    marks: Mutex<BTreeMap<String, Mark>>,
}

impl Marks {
    /// Reads the marks next to the database directory `db` (none yet: an
    /// empty set).
    pub(crate) fn open(db: &Path) -> Result<Marks, StoreError> {
        let path = db.with_file_name("commit-marks.json");
        let marks = match std::fs::read(&path) {
            Ok(bytes) => {
                serde_json::from_slice::<MarkFile>(&bytes)
                    .map_err(|e| StoreError::MarksUnreadable { path: path.clone(), source: Box::new(e) })?
                    .environments
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(StoreError::MarksUnreadable { path, source: Box::new(e) }),
        };
        Ok(Marks { path, marks: Mutex::new(marks) })
    }

    /// Checks what sled loaded against the marks, then records exactly
    /// what was loaded.
    pub(crate) fn check(&self, loaded: &[&EnvMeta]) -> Result<(), StoreError> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        for (env, mark) in marks.iter() {
            let stored = loaded.iter().find(|m| &m.name == env);
            let rolled_back = match stored {
                None => true,
                Some(m) => m.epoch != mark.epoch || m.revision < mark.revision,
            };
            if rolled_back {
                return Err(StoreError::RolledBack {
                    env: env.clone(),
                    stored: stored.map(|m| format!("revision {} of epoch {}", m.revision, m.epoch)),
                    committed: format!("revision {} of epoch {}", mark.revision, mark.epoch),
                    marks: self.path.clone(),
                });
            }
        }
        *marks = loaded
            .iter()
            .map(|m| (m.name.clone(), Mark { epoch: m.epoch.clone(), revision: m.revision }))
            .collect();
        self.persist(&marks)
    }

    /// Marks `env` at this epoch and revision (after sled flushed it).
    pub(crate) fn set(&self, env: &str, epoch: &str, revision: u64) {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        marks.insert(env.to_owned(), Mark { epoch: epoch.to_owned(), revision });
        self.persist_or_log(&marks);
    }

    /// Unmarks `env` (before sled drops it).
    pub(crate) fn remove(&self, env: &str) -> Result<(), StoreError> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if marks.remove(env).is_some() {
            // Must be on disk before the deletion: otherwise a crash in
            // between would report the deleted environment as lost.
            self.persist(&marks)?;
        }
        Ok(())
    }

    /// After a commit the write is durable whatever happens here: a
    /// failure only weakens the detection, so it is logged, not returned
    /// as a failed write.
    fn persist_or_log(&self, marks: &BTreeMap<String, Mark>) {
        if let Err(e) = self.persist(marks) {
            tracing::error!(path = %self.path.display(), error = %flagstream::follow::error_chain(&e),
                "could not record the commit mark: a later loss of this revision by the store would go undetected");
        }
    }

    fn persist(&self, marks: &BTreeMap<String, Mark>) -> Result<(), StoreError> {
        let file = MarkFile { environments: marks.clone() };
        let bytes = super::to_json("commit marks", &file)?;
        let tmp = self.path.with_extension("json.tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &self.path))
            .map_err(|e| StoreError::MarksUnreadable { path: self.path.clone(), source: Box::new(e) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, epoch: &str, revision: u64) -> EnvMeta {
        EnvMeta {
            name: name.into(),
            description: String::new(),
            epoch: epoch.into(),
            revision,
            checksum: 0,
            committed_unix_ms: 0,
            created_unix_ms: 0,
            sdk_key_hash: String::new(),
            sdk_keys: Vec::new(),
            keys_made: 0,
            audit_head: String::new(),
            confirmed_unix_ms: 0,
        }
    }

    #[test]
    fn a_store_behind_its_marks_is_refused_naming_both_revisions() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let marks = Marks::open(&db).unwrap();
        marks.check(&[]).unwrap();
        marks.set("prod", "e1", 7);
        let again = Marks::open(&db).unwrap();
        let err = again.check(&[&meta("prod", "e1", 5)]).unwrap_err().to_string();
        assert!(
            err.contains("\"prod\"") && err.contains("revision 5") && err.contains("revision 7"),
            "{err}"
        );
        assert!(err.contains("commit-marks.json"), "{err}");
        // At or past the mark: fine, and the marks follow what was loaded.
        Marks::open(&db).unwrap().check(&[&meta("prod", "e1", 9)]).unwrap();
        let err = Marks::open(&db).unwrap().check(&[&meta("prod", "e1", 8)]).unwrap_err();
        assert!(matches!(err, StoreError::RolledBack { .. }), "{err}");
    }

    #[test]
    fn a_lost_or_older_environment_is_refused_and_a_removed_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let marks = Marks::open(&db).unwrap();
        marks.check(&[&meta("a", "e1", 1), &meta("b", "e2", 3)]).unwrap();
        let err = Marks::open(&db).unwrap().check(&[&meta("a", "e1", 1)]).unwrap_err().to_string();
        assert!(err.contains("\"b\"") && err.contains("holds nothing of it"), "{err}");
        let err = Marks::open(&db).unwrap().check(&[&meta("a", "e0", 9), &meta("b", "e2", 3)]).unwrap_err();
        assert!(err.to_string().contains("epoch e0"), "{err}");
        let marks = Marks::open(&db).unwrap();
        marks.remove("b").unwrap();
        Marks::open(&db).unwrap().check(&[&meta("a", "e1", 1)]).unwrap();
    }

    #[test]
    fn an_unreadable_marks_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("commit-marks.json"), b"{garbage").unwrap();
        let err = Marks::open(&dir.path().join("db")).unwrap_err().to_string();
        assert!(err.contains("commit-marks.json"), "{err}");
    }
}
