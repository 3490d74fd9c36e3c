//! `export` and `apply`: a whole environment as files, for GitOps. `apply`
//! computes the plan against the relay, shows it, and writes it as one
//! atomic batch (one revision) with the versions it read as expected
//! versions; `--prune` deletes what the files no longer hold. Versions and
//! revisions are the store's, so files carry neither, and `export | apply`
//! is a no-op.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use flagstream::{Flag, FlagSet, Segment, wire};
use flagstream_proto::v1 as pb;

use crate::conn::{Conn, with_retry};
use crate::edit::committed;
use crate::failure::{CmdResult, Failure, exit};
use crate::file::{read_file, show_diff, strip_flag, strip_segment, yaml_for_diff};
use crate::output::{Output, print_data};

/// `apply` options.
#[derive(Debug, Args)]
pub struct ApplyArgs {
    /// A YAML/JSON file, or a directory of them (read in name order).
    #[arg(short = 'f', long)]
    pub file: PathBuf,
    /// Delete flags and segments the files do not contain.
    #[arg(long)]
    pub prune: bool,
    /// How the plan is written.
    #[command(flatten)]
    pub write: PlanArgs,
}

/// How a plan is written (`apply`, `import`).
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Show the plan and stop.
    #[arg(long)]
    pub dry_run: bool,
    /// Wait until every subscriber applied the new revision.
    #[arg(long)]
    pub wait: bool,
    /// How long `--wait` waits before exiting non-zero.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub wait_timeout: Duration,
    /// Comment recorded in the audit log.
    #[arg(long, default_value = "")]
    pub comment: String,
}

/// The environment as the relay has it (versions kept for expectations),
/// all pages read at one revision (re-read if a write landed in between).
async fn current(conn: &mut Conn) -> Result<(FlagSet, u64), Failure> {
    for _ in 0..5 {
        let mut set = FlagSet::default();
        let mut revisions = std::collections::BTreeSet::new();
        let mut token = String::new();
        loop {
            let r = conn
                .admin
                .list_flags(pb::ListFlagsRequest {
                    environment: conn.env.clone(),
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await?
                .into_inner();
            revisions.insert(r.revision);
            for f in &r.flags {
                set.flags
                    .push(wire::flag_from_proto(f).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?);
            }
            if r.next_page_token.is_empty() {
                break;
            }
            token = r.next_page_token;
        }
        token.clear();
        loop {
            let r = conn
                .admin
                .list_segments(pb::ListSegmentsRequest {
                    environment: conn.env.clone(),
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await?
                .into_inner();
            revisions.insert(r.revision);
            for s in &r.segments {
                set.segments
                    .push(wire::segment_from_proto(s).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?);
            }
            if r.next_page_token.is_empty() {
                break;
            }
            token = r.next_page_token;
        }
        if let (1, Some(&revision)) = (revisions.len(), revisions.first()) {
            return Ok((set, revision));
        }
    }
    Err(Failure::new(exit::CONFLICT, format!("{} kept changing while being read; try again", conn.env)))
}

/// `export`: the environment in the file format (YAML unless `-o json`).
pub(crate) async fn export(conn: &mut Conn) -> CmdResult {
    let (mut set, _) = current(conn).await?;
    set.flags = set.flags.into_iter().map(strip_flag).collect();
    set.segments = set.segments.into_iter().map(strip_segment).collect();
    print_data(if conn.output == Output::Json { Output::Json } else { Output::Yaml }, &set)
}

fn read_sets(path: &Path) -> Result<FlagSet, Failure> {
    let mut files = Vec::new();
    if path.is_dir() {
        let entries = std::fs::read_dir(path)
            .map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", path.display())))?;
        for e in entries {
            let p = e.map_err(|e| Failure::new(exit::INVALID, format!("{}: {e}", path.display())))?.path();
            if p.extension().is_some_and(|x| x == "yaml" || x == "yml" || x == "json") {
                files.push(p);
            }
        }
        files.sort();
    } else {
        files.push(path.to_owned());
    }
    let mut all = FlagSet::default();
    for f in files {
        let set: FlagSet = read_file(&f)?;
        all.flags.extend(set.flags);
        all.segments.extend(set.segments);
    }
    Ok(all)
}

/// A flag or a segment, as `apply` handles them.
trait Item: Clone + PartialEq + serde::Serialize {
    /// "flag" or "segment".
    const KIND: &'static str;
    fn key(&self) -> &str;
    fn version(&self) -> u64;
    /// Without the store-managed version and revision.
    fn stripped(self) -> Self;
    fn put(&self, expected: u64) -> pb::batch_op::Op;
    fn delete(&self) -> pb::batch_op::Op;
}

impl Item for Flag {
    const KIND: &'static str = "flag";
    fn key(&self) -> &str {
        &self.key
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn stripped(self) -> Self {
        strip_flag(self)
    }
    fn put(&self, expected: u64) -> pb::batch_op::Op {
        pb::batch_op::Op::PutFlag(pb::PutFlagOp {
            flag: Some(wire::flag_to_proto(self)),
            expected_version: Some(expected),
        })
    }
    fn delete(&self) -> pb::batch_op::Op {
        pb::batch_op::Op::DeleteFlag(pb::DeleteFlagOp {
            key: self.key.clone(),
            expected_version: Some(self.version),
        })
    }
}

impl Item for Segment {
    const KIND: &'static str = "segment";
    fn key(&self) -> &str {
        &self.key
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn stripped(self) -> Self {
        strip_segment(self)
    }
    fn put(&self, expected: u64) -> pb::batch_op::Op {
        pb::batch_op::Op::PutSegment(pb::PutSegmentOp {
            segment: Some(wire::segment_to_proto(self)),
            expected_version: Some(expected),
        })
    }
    fn delete(&self) -> pb::batch_op::Op {
        pb::batch_op::Op::DeleteSegment(pb::DeleteSegmentOp {
            key: self.key.clone(),
            expected_version: Some(self.version),
        })
    }
}

#[derive(Default)]
struct Counts {
    creates: usize,
    updates: usize,
    deletes: usize,
}

/// Shows each step as a diff and adds its batch operation (with the
/// version read as the expected version).
fn add_steps<T: Item>(steps: Vec<Step<T>>, ops: &mut Vec<pb::batch_op::Op>, counts: &mut Counts) {
    for step in steps {
        match step {
            Step::Create(w) => {
                counts.creates += 1;
                show_diff(
                    &format!("+ {} {:?}", T::KIND, w.key()),
                    "",
                    &yaml_for_diff(Some(&w.clone().stripped())),
                );
                ops.push(w.put(0));
            }
            Step::Update(h, w) => {
                counts.updates += 1;
                show_diff(
                    &format!("~ {} {:?}", T::KIND, w.key()),
                    &yaml_for_diff(Some(&h.clone().stripped())),
                    &yaml_for_diff(Some(&w.clone().stripped())),
                );
                ops.push(w.put(h.version()));
            }
            Step::Delete(h) => {
                counts.deletes += 1;
                eprintln!("- {} {:?}", T::KIND, h.key());
                ops.push(h.delete());
            }
        }
    }
}

enum Step<T> {
    Create(T),
    Update(T, T),
    Delete(T),
}

fn plan<T: Item>(want: Vec<T>, have: Vec<T>, prune: bool) -> Result<Vec<Step<T>>, Failure> {
    let mut have: BTreeMap<String, T> = have.into_iter().map(|t| (t.key().to_owned(), t)).collect();
    let mut seen = std::collections::HashSet::new();
    let mut steps = Vec::new();
    for w in want {
        let k = w.key().to_owned();
        if !seen.insert(k.clone()) {
            return Err(Failure::new(exit::INVALID, format!("{} {k:?} appears twice in the files", T::KIND)));
        }
        match have.remove(&k) {
            None => steps.push(Step::Create(w)),
            Some(h) if h.clone().stripped() == w.clone().stripped() => {}
            Some(h) => steps.push(Step::Update(h, w)),
        }
    }
    if prune {
        steps.extend(have.into_values().map(Step::Delete));
    }
    Ok(steps)
}

/// `apply`.
pub(crate) async fn apply(conn: &mut Conn, a: ApplyArgs) -> CmdResult {
    let want = read_sets(&a.file)?;
    apply_set(conn, want, a.prune, &a.write).await
}

/// Makes the environment hold `want` (and, with `prune`, nothing else):
/// validates the result, shows the plan, writes it as one batch.
pub(crate) async fn apply_set(conn: &mut Conn, want: FlagSet, prune: bool, a: &PlanArgs) -> CmdResult {
    let (have, revision) = current(conn).await?;
    // Validate what the environment would become (the files may hold only
    // part of it), with the validator the relay runs, before showing a plan.
    let mut next = FlagSet::default();
    if !prune {
        next.flags =
            have.flags.iter().filter(|h| !want.flags.iter().any(|w| w.key == h.key)).cloned().collect();
        next.segments =
            have.segments.iter().filter(|h| !want.segments.iter().any(|w| w.key == h.key)).cloned().collect();
    }
    next.flags.extend(want.flags.iter().cloned());
    next.segments.extend(want.segments.iter().cloned());
    let flags = plan(want.flags, have.flags, prune)?;
    let segments = plan(want.segments, have.segments, prune)?;
    flagstream::validate::flag_set(&next, &flagstream::Limits::default())
        .map_err(|e| Failure::new(exit::INVALID, e.to_string()))?;
    if flags.is_empty() && segments.is_empty() {
        println!("{}: up to date at revision {revision}", conn.env);
        return Ok(());
    }
    let mut ops = Vec::new();
    let mut counts = Counts::default();
    // Segments first in the plan display; the batch is atomic either way.
    add_steps(segments, &mut ops, &mut counts);
    add_steps(flags, &mut ops, &mut counts);
    let Counts { creates, updates, deletes } = counts;
    eprintln!(
        "plan for {}: {creates} to create, {updates} to update, {deletes} to delete (from revision {revision})",
        conn.env
    );
    if a.dry_run {
        return Ok(());
    }
    conn.confirm(&format!("apply {} changes to {}", creates + updates + deletes, conn.env))?;
    let r = {
        let req = pb::BatchRequest {
            environment: conn.env.clone(),
            ops: ops.into_iter().map(|op| pb::BatchOp { op: Some(op) }).collect(),
            // The plan was computed against `revision`: any other write
            // since then makes this a conflict, not a silent mix.
            expected_revision: Some(revision),
            comment: a.comment.clone(),
        };
        with_retry(|| {
            let (mut admin, req) = (conn.admin.clone(), req.clone());
            async move { admin.batch(req).await }
        })
        .await?
    }
    .into_inner();
    let new_revision = r.result.map_or(0, |r| r.revision);
    let what = format!("applied to {}", conn.env);
    committed(conn, &what, new_revision, a.wait, a.wait_timeout).await
}
