//! Segment commands of flagctl: list, show, replace from a file, delete,
//! history. Writes follow the same read → diff → confirm → expected-version
//! path as flag writes (`flag.rs`).

use std::path::PathBuf;

use clap::Subcommand;
use flagstream::{Segment, wire};
use flagstream_proto::v1 as pb;

use crate::conn::{Conn, with_retry};
use crate::edit::{WriteArgs, committed};
use crate::failure::{CmdResult, Failure, exit, invalid};
use crate::file::{read_file, show_diff, strip_segment, yaml_for_diff};
use crate::output::{Output, print_data};

/// `segment` subcommands.
#[derive(Debug, Subcommand)]
pub enum SegmentCmd {
    /// List segments.
    List,
    /// Show one segment.
    Get {
        /// Segment key.
        key: String,
    },
    /// Create or replace a segment from a YAML/JSON file.
    Set {
        /// Segment key (must match the file).
        key: String,
        /// The file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Delete a segment.
    Delete {
        /// Segment key.
        key: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
}

/// The segment of a Get response (the relay always sends one on success).
fn segment_of(r: pb::GetSegmentResponse) -> Result<Segment, Failure> {
    let s = r.segment.ok_or_else(|| Failure::new(exit::ERROR, "relay sent no segment"))?;
    wire::segment_from_proto(&s).map_err(|e| Failure::new(exit::ERROR, e.to_string()))
}

/// Runs a `segment` subcommand.
pub(crate) async fn segment_cmd(conn: &mut Conn, cmd: SegmentCmd) -> CmdResult {
    match cmd {
        SegmentCmd::List => {
            let mut segs: Vec<Segment> = Vec::new();
            let mut token = String::new();
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
                for sg in &r.segments {
                    segs.push(
                        wire::segment_from_proto(sg).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?,
                    );
                }
                if r.next_page_token.is_empty() {
                    break;
                }
                token = r.next_page_token;
            }
            if conn.output == Output::Table {
                let mut t = comfy_table::Table::new();
                t.load_preset(comfy_table::presets::NOTHING);
                t.set_header(["KEY", "INCLUDED", "EXCLUDED", "RULES", "VERSION"]);
                for s in &segs {
                    t.add_row([
                        s.key.clone(),
                        s.included.len().to_string(),
                        s.excluded.len().to_string(),
                        s.rules.len().to_string(),
                        s.version.to_string(),
                    ]);
                }
                println!("{t}");
            } else {
                print_data(conn.output, &segs)?;
            }
        }
        SegmentCmd::Get { key } => {
            let r = conn
                .admin
                .get_segment(pb::GetSegmentRequest { environment: conn.env.clone(), key })
                .await?
                .into_inner();
            let s = segment_of(r)?;
            print_data(if conn.output == Output::Table { Output::Yaml } else { conn.output }, &s)?;
        }
        SegmentCmd::Set { key, file, write } => {
            let after: Segment = read_file(&file)?;
            if after.key != key {
                return Err(invalid(format!(
                    "{}: holds segment {:?}, not {key:?}",
                    file.display(),
                    after.key
                )));
            }
            let before = match conn
                .admin
                .get_segment(pb::GetSegmentRequest { environment: conn.env.clone(), key: key.clone() })
                .await
            {
                Ok(r) => Some(segment_of(r.into_inner())?),
                Err(s) if s.code() == tonic::Code::NotFound => None,
                Err(s) => return Err(s.into()),
            };
            let b = yaml_for_diff(before.clone().map(strip_segment).as_ref());
            let a = yaml_for_diff(Some(&strip_segment(after.clone())));
            if a == b {
                println!("segment {key:?}: no change");
                return Ok(());
            }
            show_diff(&format!("segment {key:?} in {}:", conn.env), &b, &a);
            conn.confirm(&format!("write segment {key:?}"))?;
            let r = {
                let req = pb::PutSegmentRequest {
                    environment: conn.env.clone(),
                    segment: Some(wire::segment_to_proto(&after)),
                    expected_version: Some(before.map_or(0, |s| s.version)),
                    comment: write.comment.clone(),
                };
                with_retry(|| {
                    let (mut admin, req) = (conn.admin.clone(), req.clone());
                    async move { admin.put_segment(req).await }
                })
                .await?
            }
            .into_inner();
            let revision = r.result.map_or(0, |r| r.revision);
            committed(conn, &format!("segment {key:?} written"), revision, write.wait, write.wait_timeout)
                .await?;
        }
        SegmentCmd::Delete { key, write } => {
            let r = conn
                .admin
                .get_segment(pb::GetSegmentRequest { environment: conn.env.clone(), key: key.clone() })
                .await?
                .into_inner();
            let before = segment_of(r)?;
            show_diff(
                &format!("segment {key:?} in {}:", conn.env),
                &yaml_for_diff(Some(&strip_segment(before.clone()))),
                "",
            );
            conn.confirm(&format!("delete segment {key:?}"))?;
            let r = {
                let req = pb::DeleteSegmentRequest {
                    environment: conn.env.clone(),
                    key: key.clone(),
                    expected_version: Some(before.version),
                    comment: write.comment.clone(),
                };
                with_retry(|| {
                    let (mut admin, req) = (conn.admin.clone(), req.clone());
                    async move { admin.delete_segment(req).await }
                })
                .await?
            }
            .into_inner();
            let revision = r.result.map_or(0, |r| r.revision);
            committed(conn, &format!("segment {key:?} deleted"), revision, write.wait, write.wait_timeout)
                .await?;
        }
    }
    Ok(())
}
