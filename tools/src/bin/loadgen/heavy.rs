//! `--heavy`: a writer of large revisions beside the measured one.

use std::time::{Duration, Instant};

use flagstream_proto::v1 as pb;
use flagstream_tests::relay::{Admin, bool_flag};
use tokio::sync::watch;

/// Flags in the heavy environment.
const FLAGS: usize = 50_000;
/// Flags per batch (the Batch op limit).
const BATCH: usize = 10_000;
/// Keys per segment patch (the segment key limit).
const KEYS: usize = 100_000;

fn batch(round: usize, part: usize) -> pb::BatchRequest {
    let ops = (part * BATCH..(part + 1) * BATCH)
        .map(|i| {
            let mut f = bool_flag(&format!("heavy-{i}"), (i + round).is_multiple_of(2));
            f.description = format!("round {round}");
            pb::BatchOp {
                op: Some(pb::batch_op::Op::PutFlag(pb::PutFlagOp { flag: Some(f), expected_version: None })),
            }
        })
        .collect();
    pb::BatchRequest { environment: "heavy".into(), ops, expected_revision: None, comment: String::new() }
}

fn keys(round: usize) -> pb::ContextKeys {
    pb::ContextKeys {
        keys: (0..KEYS).map(|i| format!("user-{i:08}-{}", round % 2)).collect(),
        ..Default::default()
    }
}

/// Creates the 50,000-flag environment and its (empty) segment.
pub(super) async fn setup(admin: &mut Admin) -> anyhow::Result<()> {
    admin
        .create_environment(pb::CreateEnvironmentRequest { name: "heavy".into(), description: String::new() })
        .await?;
    for part in 0..FLAGS / BATCH {
        admin.batch(batch(0, part)).await?;
    }
    let segment = pb::Segment { key: "big".into(), ..Default::default() };
    let put = pb::PutSegmentRequest {
        environment: "heavy".into(),
        segment: Some(segment),
        expected_version: None,
        comment: String::new(),
    };
    admin.put_segment(put).await?;
    Ok(())
}

/// Writes flat out until stopped.
pub(super) struct Writer {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<String>>,
}

impl Writer {
    pub(super) fn start(mut admin: Admin) -> Writer {
        let (stop, stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let (mut batches, mut patches) = (Vec::new(), Vec::new());
            let mut round = 1;
            while !*stopped.borrow() {
                let started = Instant::now();
                admin.batch(batch(round, round % (FLAGS / BATCH))).await?;
                batches.push(started.elapsed());
                // Add 100,000 keys, then swap them for 100,000 others.
                use pb::segment_patch::Op as P;
                let mut ops = vec![pb::SegmentPatch { op: Some(P::AddIncluded(keys(round))) }];
                if round > 1 {
                    ops.insert(0, pb::SegmentPatch { op: Some(P::RemoveIncluded(keys(round - 1))) });
                }
                let patch = pb::PatchSegmentRequest {
                    environment: "heavy".into(),
                    key: "big".into(),
                    expected_version: None,
                    ops,
                    comment: String::new(),
                };
                let started = Instant::now();
                admin.patch_segment(patch).await?;
                patches.push(started.elapsed());
                round += 1;
            }
            let mean = |v: &[Duration]| v.iter().sum::<Duration>() / (v.len().max(1) as u32);
            Ok(format!(
                "heavy writes               {} batches of {BATCH} flags into a {FLAGS}-flag environment (mean {:.0?} each), {} segment patches of {KEYS} keys (mean {:.0?} each)",
                batches.len(),
                mean(&batches),
                patches.len(),
                mean(&patches)
            ))
        });
        Writer { stop, task }
    }

    pub(super) async fn stop(self) -> anyhow::Result<String> {
        // The task checks between writes; a send error means it ended.
        let _ = self.stop.send(true);
        self.task.await?
    }
}
