//! Writing one flag: the options every write takes, reading the current
//! flag, showing the change, confirming, sending it with the version it was
//! read at (a concurrent edit is a conflict, never an overwrite) and, with
//! `--wait`, following its propagation.

use std::time::Duration;

use clap::Args;
use flagstream::{Flag, FlagType, wire};
use flagstream_proto::v1 as pb;
use serde_json::Value as Json;

use crate::conn::{Conn, with_retry};
use crate::failure::{CmdResult, Failure, exit, invalid};
use crate::file::{show_diff, strip_flag, yaml_for_diff};
use crate::propagation::wait_propagation;

/// Options shared by every write.
#[derive(Debug, Clone, Args)]
pub struct WriteArgs {
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

pub(crate) fn parse_value(t: FlagType, s: &str) -> Result<Json, Failure> {
    let bad = || invalid(format!("{s:?} is not a {} value", t.name()));
    Ok(match t {
        FlagType::Bool => Json::Bool(s.parse().map_err(|_| bad())?),
        FlagType::String => Json::String(s.to_owned()),
        FlagType::Int => Json::from(s.parse::<i64>().map_err(|_| bad())?),
        FlagType::Float => Json::from(s.parse::<f64>().map_err(|_| bad())?),
        FlagType::Json => serde_json::from_str(s).map_err(|_| bad())?,
    })
}

/// The index of a variation named by value or `#INDEX`.
pub(crate) fn variation_index(f: &Flag, s: &str) -> Result<u32, Failure> {
    if let Some(i) = s.strip_prefix('#') {
        let i: u32 = i.parse().map_err(|_| invalid(format!("{s:?}: not a variation index")))?;
        return if (i as usize) < f.variations.len() {
            Ok(i)
        } else {
            Err(invalid(format!("{s}: flag {:?} has {} variations", f.key, f.variations.len())))
        };
    }
    let want = parse_value(f.flag_type, s)?;
    f.variations.iter().position(|v| *v == want).map(|i| i as u32).ok_or_else(|| {
        invalid(format!(
            "flag {:?} has no variation {s}; variations: {}",
            f.key,
            Json::Array(f.variations.clone())
        ))
    })
}

pub(crate) async fn get_flag(conn: &mut Conn, key: &str) -> Result<Flag, Failure> {
    let r = conn
        .admin
        .get_flag(pb::GetFlagRequest { environment: conn.env.clone(), key: key.into() })
        .await?
        .into_inner();
    let f = r.flag.ok_or_else(|| Failure::new(exit::ERROR, "relay sent no flag"))?;
    wire::flag_from_proto(&f).map_err(|e| Failure::new(exit::ERROR, e.to_string()))
}

/// Reports a committed write and, with `--wait`, follows its propagation.
pub(crate) async fn committed(
    conn: &mut Conn,
    what: &str,
    revision: u64,
    wait: bool,
    timeout: Duration,
) -> CmdResult {
    println!("{what}: revision {revision}");
    if wait {
        wait_propagation(conn, revision, timeout).await?;
    }
    Ok(())
}

/// Shows the change, confirms, writes with the expected version, waits.
pub(crate) async fn write_flag(
    conn: &mut Conn,
    before: Option<&Flag>,
    after: Flag,
    w: &WriteArgs,
) -> CmdResult {
    write_flag_finalized(conn, before, after, w, |_| {}).await
}

/// [`write_flag`], with `finalize` applied to the flag after the
/// confirmation, just before it is sent (what depends on the time of the
/// write, e.g. which ramp steps have started).
pub(crate) async fn write_flag_finalized(
    conn: &mut Conn,
    before: Option<&Flag>,
    mut after: Flag,
    w: &WriteArgs,
    finalize: impl FnOnce(&mut Flag),
) -> CmdResult {
    let b = yaml_for_diff(before.cloned().map(strip_flag).as_ref());
    let a = yaml_for_diff(Some(&strip_flag(after.clone())));
    if a == b {
        println!("flag {:?}: no change", after.key);
        return Ok(());
    }
    show_diff(&format!("flag {:?} in {}:", after.key, conn.env), &b, &a);
    conn.confirm(&format!("write flag {:?}", after.key))?;
    finalize(&mut after);
    let expected = Some(before.map_or(0, |f| f.version));
    let r = {
        let req = pb::PutFlagRequest {
            environment: conn.env.clone(),
            flag: Some(wire::flag_to_proto(&after)),
            expected_version: expected,
            comment: w.comment.clone(),
        };
        with_retry(|| {
            let (mut admin, req) = (conn.admin.clone(), req.clone());
            async move { admin.put_flag(req).await }
        })
        .await?
    }
    .into_inner();
    let revision = r.result.map_or(0, |r| r.revision);
    committed(conn, &format!("flag {:?} written", after.key), revision, w.wait, w.wait_timeout).await
}
