//! Commit marks: the newest committed revision of every environment, kept
//! in a small file next to the sled database (`commit-marks.json` in the
//! data directory). sled checks its log as it recovers and cuts a garbled
//! or truncated log back to the last consistent point, silently: the store
//! opens, its checksums match, and acknowledged writes are gone. The marks
//! turn that into a refusal to start that names the environment and both
//! revisions.
//!
//! A commit or a creation is marked after sled has flushed it, so a mark
//! never claims a revision sled was not holding durably; after a start the
//! file is rewritten from what was loaded. A deletion is unmarked before
//! sled deletes anything, and that one rewrite is fsynced (file and
//! directory), so no version of the file that can survive a power loss
//! names an environment deleted on purpose. Other rewrites are replaced by
//! rename, never written in place, and not fsynced (that would double the
//! commit's fsyncs): after a power loss the file may be older than sled,
//! hold an older epoch of a re-created environment, or be unreadable. So
//! what is refused is what an old file cannot explain: an environment at
//! the marked epoch but behind the marked revision, and a marked
//! environment the store does not hold at all (sled's recovery cut back to
//! before its creation). An environment the store holds at another epoch,
//! and an unparsable file, are logged and the marks rebuilt from the
//! store.

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
    /// The file did not exist when opened: a new data directory, or one
    /// restored or accepted short with the file deleted (OPERATIONS.md §2).
    missing: bool,
}

impl Marks {
    /// Reads the marks next to the database directory `db` (none yet, or
    /// unparsable: an empty set, logged).
    pub(crate) fn open(db: &Path) -> Result<Marks, StoreError> {
        let path = db.with_file_name("commit-marks.json");
        let mut missing = false;
        let marks = match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<MarkFile>(&bytes) {
                Ok(f) => f.environments,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e,
                        "the commit marks file does not parse (a power loss while it was replaced?): rebuilt from the store, without checking it this once");
                    BTreeMap::new()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                missing = true;
                BTreeMap::new()
            }
            Err(e) => return Err(StoreError::MarksUnreadable { path, source: Box::new(e) }),
        };
        Ok(Marks { path, marks: Mutex::new(marks), missing })
    }

    /// Whether the file did not exist when opened.
    pub(crate) fn missing(&self) -> bool {
        self.missing
    }

    /// Checks what sled loaded against the marks, then records exactly
    /// what was loaded.
    pub(crate) fn check(&self, loaded: &[&EnvMeta]) -> Result<(), StoreError> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        for (env, mark) in marks.iter() {
            match loaded.iter().find(|m| &m.name == env) {
                Some(m) if m.epoch == mark.epoch && m.revision < mark.revision => {
                    return Err(StoreError::RolledBack {
                        env: env.clone(),
                        stored: format!("revision {} of epoch {}", m.revision, m.epoch),
                        committed: format!("revision {} of epoch {}", mark.revision, mark.epoch),
                        marks: self.path.clone(),
                    });
                }
                Some(m) if m.epoch != mark.epoch => {
                    tracing::warn!(env = %env, stored_epoch = %m.epoch, marked_epoch = %mark.epoch,
                    "the store holds another epoch of this environment than the commit marks (re-created, promoted or resynced after the marks were last written?)")
                }
                Some(_) => {}
                None => {
                    return Err(StoreError::RolledBack {
                        env: env.clone(),
                        stored: "no such environment".into(),
                        committed: format!("revision {} of epoch {}", mark.revision, mark.epoch),
                        marks: self.path.clone(),
                    });
                }
            }
        }
        *marks = loaded
            .iter()
            .map(|m| (m.name.clone(), Mark { epoch: m.epoch.clone(), revision: m.revision }))
            .collect();
        self.persist(&marks)
            .map_err(|e| StoreError::MarksUnreadable { path: self.path.clone(), source: Box::new(e) })
    }

    /// Marks `env` at this epoch and revision (after sled flushed it).
    pub(crate) fn set(&self, env: &str, epoch: &str, revision: u64) {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        marks.insert(env.to_owned(), Mark { epoch: epoch.to_owned(), revision });
        self.persist_or_log(&marks);
    }

    /// Unmarks `env`, durably (the file and its directory fsynced), before
    /// sled deletes it: a deleted environment is then never mistaken for
    /// one sled lost. A failure leaves the mark, and the deletion must not
    /// go ahead.
    pub(crate) fn remove(&self, env: &str) -> Result<(), StoreError> {
        let mut marks = self.marks.lock().unwrap_or_else(|p| p.into_inner());
        if marks.remove(env).is_some() {
            self.persist_durably(&marks)
                .map_err(|e| StoreError::MarksUnreadable { path: self.path.clone(), source: Box::new(e) })?;
        }
        Ok(())
    }

    fn persist_durably(&self, marks: &BTreeMap<String, Mark>) -> std::io::Result<()> {
        let file = MarkFile { environments: marks.clone() };
        let bytes = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        {
            use std::io::Write as _;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::File::open(dir)?.sync_all()
    }

    /// After a commit the write is durable whatever happens here: a
    /// failure only weakens the detection, so it is logged, not returned
    /// as a failed write.
    fn persist_or_log(&self, marks: &BTreeMap<String, Mark>) {
        if let Err(e) = self.persist(marks) {
            tracing::error!(path = %self.path.display(), error = %e,
                "could not record the commit marks: a later loss of this revision by the store would go undetected");
        }
    }

    fn persist(&self, marks: &BTreeMap<String, Mark>) -> std::io::Result<()> {
        let file = MarkFile { environments: marks.clone() };
        let bytes = serde_json::to_vec(&file).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
        let mut f = opts.open(&tmp)?;
        // Owner-only also when a tmp file of another mode was left behind.
        #[cfg(unix)]
        f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
        std::io::Write::write_all(&mut f, &bytes)?;
        drop(f);
        std::fs::rename(&tmp, &self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str, epoch: &str, revision: u64) -> EnvMeta {
        EnvMeta::for_tests(name, epoch, revision)
    }

    /// A missing file is what makes a primary renew its epochs
    /// (`server.rs`); one written at the last start is not missing.
    #[test]
    fn a_missing_file_is_reported_once() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let marks = Marks::open(&db).unwrap();
        assert!(marks.missing());
        marks.check(&[&meta("prod", "e1", 3)]).unwrap();
        assert!(!Marks::open(&db).unwrap().missing());
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

    /// What an old marks file can hold (an older epoch) is logged, not
    /// refused, and the marks follow the store; an environment deleted on
    /// purpose is unmarked first.
    #[test]
    fn another_epoch_or_a_deleted_environment_is_accepted_and_remarked() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let marks = Marks::open(&db).unwrap();
        marks.check(&[&meta("a", "e1", 1), &meta("b", "e2", 3)]).unwrap();
        marks.remove("b").unwrap();
        Marks::open(&db).unwrap().check(&[&meta("a", "e1", 1)]).unwrap();
        Marks::open(&db).unwrap().check(&[&meta("a", "e0", 9)]).unwrap();
        // Now marked at e0/9: behind that is refused.
        let err = Marks::open(&db).unwrap().check(&[&meta("a", "e0", 2)]).unwrap_err();
        assert!(err.to_string().contains("revision 9 of epoch e0"), "{err}");
        let marks = Marks::open(&db).unwrap();
        marks.remove("a").unwrap();
        Marks::open(&db).unwrap().check(&[&meta("a", "e0", 1)]).unwrap();
    }

    /// A marked environment the store does not hold at all (sled's recovery
    /// cut back to before it was created) is refused, naming it.
    #[test]
    fn a_marked_environment_the_store_lost_entirely_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let marks = Marks::open(&db).unwrap();
        marks.check(&[&meta("a", "e1", 1), &meta("b", "e2", 3)]).unwrap();
        let err = Marks::open(&db).unwrap().check(&[&meta("a", "e1", 1)]).unwrap_err();
        assert!(matches!(err, StoreError::RolledBack { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("\"b\"") && text.contains("revision 3 of epoch e2"), "{text}");
    }

    /// An unparsable file (a power loss mid-replace) is rebuilt, not a
    /// refusal to start.
    #[test]
    fn an_unparsable_marks_file_is_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("commit-marks.json"), b"{garbage").unwrap();
        let marks = Marks::open(&dir.path().join("db")).unwrap();
        marks.check(&[&meta("a", "e1", 4)]).unwrap();
        let err = Marks::open(&dir.path().join("db")).unwrap().check(&[&meta("a", "e1", 3)]).unwrap_err();
        assert!(matches!(err, StoreError::RolledBack { .. }), "{err}");
    }
}
