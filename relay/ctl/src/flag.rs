//! Flag commands of flagctl (segments are `segment.rs`, `eval` is
//! `eval.rs`, ramps `ramp.rs`). Every write reads the current
//! item, shows the diff, asks for confirmation on a terminal, and sends the
//! version it read as the expected version, so a concurrent edit is a
//! conflict naming who changed it, never a silent overwrite.

use std::path::PathBuf;

use clap::{Subcommand, ValueEnum};
use flagstream::model::{Rollout, Serve, WeightedVariation};
use flagstream::{Flag, FlagType, wire};
use flagstream_proto::v1 as pb;
use serde_json::Value as Json;

use crate::conn::{Conn, with_retry};
use crate::edit::{WriteArgs, committed, get_flag, parse_value, variation_index, write_flag};
use crate::failure::{CmdResult, Failure, exit, invalid};
use crate::file::{read_file, show_diff, strip_flag, yaml_for_diff};
use crate::output::{Output, print_data};

/// Flag types on the command line.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum TypeArg {
    /// true / false.
    Bool,
    /// Strings.
    String,
    /// 64-bit integers.
    Int,
    /// Floats.
    Float,
    /// JSON documents.
    Json,
}

/// `flag` subcommands.
#[derive(Debug, Subcommand)]
pub enum FlagCmd {
    /// List flags: key, type, on/off, variations, rules, version, last change.
    List {
        /// Only flags with this tag.
        #[arg(long)]
        tag: Option<String>,
        /// Only keys starting with this.
        #[arg(long)]
        prefix: Option<String>,
    },
    /// Show one flag (YAML by default; -o json).
    Get {
        /// Flag key.
        key: String,
    },
    /// Create a flag (off by default; bool flags get variations true,false).
    Create {
        /// Flag key.
        key: String,
        /// Value type.
        #[arg(long = "type", value_enum, default_value = "bool")]
        flag_type: TypeArg,
        /// Variations, comma-separated (required except for bool).
        #[arg(long, value_delimiter = ',')]
        variations: Vec<String>,
        /// Variation served when off [default: false for bool, else the first].
        #[arg(long)]
        off_variation: Option<String>,
        /// Variation served when on and nothing matches [default: true for bool, else the first].
        #[arg(long)]
        fallthrough: Option<String>,
        /// Turn it on at once.
        #[arg(long)]
        on: bool,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
        /// Tags, comma-separated.
        #[arg(long, value_delimiter = ',')]
        tags: Vec<String>,
        /// Answer it over OFREP to client-side keys (browsers, apps).
        #[arg(long)]
        client_visible: bool,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Show a flag to client-side keys over OFREP (`true`), or hide it
    /// from them (`false`: they get FLAG_NOT_FOUND, as for no flag).
    ClientVisible {
        /// Flag key.
        key: String,
        /// true or false.
        #[arg(action = clap::ArgAction::Set)]
        visible: bool,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Turn targeting on.
    On {
        /// Flag key.
        key: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Turn targeting off (serve the off variation).
    Off {
        /// Flag key.
        key: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Set the fallthrough to a percentage rollout: `flag rollout KEY true=10 false=90`.
    Rollout {
        /// Flag key.
        key: String,
        /// VARIATION=PERCENT pairs summing to 100 (percent may have 3 decimals).
        #[arg(required = true)]
        weights: Vec<String>,
        /// Attribute to bucket by [default: key].
        #[arg(long, default_value = "")]
        bucket_by: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Ramp a variation up over time (a schedule each SDK follows by its
    /// own clock), pause a ramp, or roll it back:
    /// `flag ramp KEY --steps 1%,5%@1h,25%@1d,100%@3d`.
    Ramp(crate::ramp::RampArgs),
    /// Add or remove individually targeted context keys.
    Target {
        /// Flag key.
        key: String,
        /// The variation (its value, or #INDEX).
        #[arg(long)]
        variation: String,
        /// Context keys to add, comma-separated.
        #[arg(long, value_delimiter = ',')]
        add: Vec<String>,
        /// Context keys to remove, comma-separated.
        #[arg(long, value_delimiter = ',')]
        remove: Vec<String>,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Add or remove targeting rules.
    #[command(subcommand)]
    Rule(RuleCmd),
    /// Replace a flag with the one in a YAML/JSON file.
    Set {
        /// Flag key (must match the file).
        key: String,
        /// The file.
        #[arg(short = 'f', long)]
        file: PathBuf,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// What the SDKs evaluated (their usage summaries, as the relay holds
    /// them since it started): per flag, evaluations per variation over the
    /// last hour and day, fallbacks to callers' defaults by cause (missing,
    /// wrong_type, malformed, not_ready), SDK instances, last evaluation and
    /// the defaults callers pass. A WARNING when a default differs from the
    /// value the flag serves to most contexts (a caller that falls back gets
    /// the other behaviour). At the primary it covers the whole relay tree.
    Usage {
        /// One flag key; all flags of the environment (and keys SDKs asked
        /// for that are no flag) when absent.
        key: Option<String>,
    },
    /// Flags that look ready to retire, with the evidence: not evaluated
    /// for N days (or never, since created or since the relay began
    /// collecting usage), or serving one variation to every evaluation for
    /// N days. Creation and change times come from the audit log.
    ///
    /// "Not evaluated" means no usage summary reported the flag to this
    /// relay: it cannot tell a flag nobody evaluates from one evaluated only
    /// by clients that send no usage (SDKs with usage reports off, SDKs
    /// without usage reporting, clients of other relays on the same
    /// database). The table ends with this note; `-o json` has it as
    /// `caveat`.
    Stale {
        /// Days the condition must have held (fractions allowed).
        #[arg(long, default_value_t = 30.0)]
        days: f64,
    },
    /// Delete a flag.
    Delete {
        /// Flag key.
        key: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Who changed a flag, when, from the audit log.
    History {
        /// Flag key.
        key: String,
        /// Most entries.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        /// Show what each change did (the recorded diff).
        #[arg(long)]
        diff: bool,
    },
}

/// `flag rule` subcommands.
#[derive(Debug, Subcommand)]
pub enum RuleCmd {
    /// Add a rule: `flag rule add KEY --id us --clause "country in US,CA" --serve true`.
    Add {
        /// Flag key.
        key: String,
        /// Rule id (unique within the flag).
        #[arg(long)]
        id: String,
        /// A clause "ATTRIBUTE OP V1,V2" (prefix "!" to negate); repeat for AND.
        #[arg(long = "clause", required = true)]
        clauses: Vec<String>,
        /// The variation served when it matches (value or #INDEX).
        #[arg(long)]
        serve: String,
        /// Position among the rules (0 = first) [default: last].
        #[arg(long)]
        position: Option<usize>,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
    /// Remove a rule by id.
    Remove {
        /// Flag key.
        key: String,
        /// Rule id.
        #[arg(long)]
        id: String,
        /// Write options.
        #[command(flatten)]
        write: WriteArgs,
    },
}

/// Parses "ATTRIBUTE OP V1,V2" (leading "!" negates). Values are typed:
/// numbers and true/false become numbers and bools unless quoted.
fn parse_clause(s: &str) -> Result<flagstream::model::Clause, Failure> {
    let (negate, rest) = match s.trim().strip_prefix('!') {
        Some(r) => (true, r.trim()),
        None => (false, s.trim()),
    };
    let mut parts = rest.splitn(3, char::is_whitespace);
    let (Some(attribute), Some(op), Some(values)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid(format!("--clause {s:?}: expected \"ATTRIBUTE OP VALUE[,VALUE...]\"")));
    };
    let op: flagstream::model::Operator = serde_json::from_value(Json::String(op.to_owned()))
        .map_err(|_| invalid(format!("--clause {s:?}: unknown operator {op:?}")))?;
    let values = values
        .split(',')
        .map(|v| {
            let v = v.trim();
            if let Some(q) = v.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
                Json::String(q.to_owned())
            } else if let Ok(b) = v.parse::<bool>() {
                Json::Bool(b)
            } else if let Ok(n) = v.parse::<i64>() {
                Json::from(n)
            } else if let Ok(f) = v.parse::<f64>() {
                Json::from(f)
            } else {
                Json::String(v.to_owned())
            }
        })
        .collect();
    Ok(flagstream::model::Clause {
        context_kind: String::new(),
        attribute: attribute.to_owned(),
        op,
        values,
        negate,
    })
}

/// Runs a `flag` subcommand.
pub(crate) async fn flag_cmd(conn: &mut Conn, cmd: FlagCmd) -> CmdResult {
    match cmd {
        FlagCmd::List { tag, prefix } => {
            let mut flags: Vec<Flag> = Vec::new();
            let mut token = String::new();
            loop {
                let r = conn
                    .admin
                    .list_flags(pb::ListFlagsRequest {
                        environment: conn.env.clone(),
                        tag: tag.clone().unwrap_or_default(),
                        key_prefix: prefix.clone().unwrap_or_default(),
                        page_token: token.clone(),
                        ..Default::default()
                    })
                    .await?
                    .into_inner();
                for f in &r.flags {
                    flags.push(
                        wire::flag_from_proto(f).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?,
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
                t.set_header(["KEY", "TYPE", "ON", "VARIATIONS", "RULES", "VERSION", "LAST CHANGE"]);
                for f in &flags {
                    t.add_row([
                        f.key.clone(),
                        f.flag_type.name().to_owned(),
                        if f.on { "on" } else { "off" }.to_owned(),
                        Json::Array(f.variations.clone()).to_string(),
                        f.rules.len().to_string(),
                        f.version.to_string(),
                        format!("revision {}", f.revision),
                    ]);
                }
                println!("{t}");
            } else {
                print_data(conn.output, &flags)?;
            }
        }
        FlagCmd::Get { key } => {
            let f = get_flag(conn, &key).await?;
            print_data(if conn.output == Output::Table { Output::Yaml } else { conn.output }, &f)?;
            if conn.output == Output::Table {
                crate::ramp::print_summary(&f);
            }
        }
        FlagCmd::Ramp(args) => crate::ramp::ramp(conn, args).await?,
        FlagCmd::Create {
            key,
            flag_type,
            variations,
            off_variation,
            fallthrough,
            on,
            description,
            tags,
            client_visible,
            write,
        } => {
            let t = match flag_type {
                TypeArg::Bool => FlagType::Bool,
                TypeArg::String => FlagType::String,
                TypeArg::Int => FlagType::Int,
                TypeArg::Float => FlagType::Float,
                TypeArg::Json => FlagType::Json,
            };
            let variations: Vec<Json> = if variations.is_empty() && t == FlagType::Bool {
                vec![Json::Bool(true), Json::Bool(false)]
            } else if variations.is_empty() {
                return Err(invalid(format!("--variations is required for a {} flag", t.name())));
            } else {
                variations.iter().map(|v| parse_value(t, v)).collect::<Result<_, _>>()?
            };
            let mut f = Flag {
                key: key.clone(),
                flag_type: t,
                variations,
                on,
                off_variation: 0,
                targets: vec![],
                rules: vec![],
                fallthrough: Serve::variation(0),
                prerequisites: vec![],
                salt: String::new(),
                version: 0,
                revision: 0,
                description,
                tags,
                // No $USER (e.g. in CI): the owner is left empty.
                owner: std::env::var("USER").unwrap_or_default(),
                client_visible,
            };
            let bool_default =
                |want: bool| f.variations.iter().position(|v| *v == Json::Bool(want)).unwrap_or(0) as u32;
            f.off_variation = match &off_variation {
                Some(v) => variation_index(&f, v)?,
                None if t == FlagType::Bool => bool_default(false),
                None => 0,
            };
            let ft = match &fallthrough {
                Some(v) => variation_index(&f, v)?,
                None if t == FlagType::Bool => bool_default(true),
                None => 0,
            };
            f.fallthrough = Serve::variation(ft);
            write_flag(conn, None, f, &write).await?;
        }
        FlagCmd::On { key, write } => set_on(conn, &key, true, &write).await?,
        FlagCmd::Off { key, write } => set_on(conn, &key, false, &write).await?,
        FlagCmd::ClientVisible { key, visible, write } => {
            let before = get_flag(conn, &key).await?;
            let mut after = before.clone();
            after.client_visible = visible;
            write_flag(conn, Some(&before), after, &write).await?
        }
        FlagCmd::Rollout { key, weights, bucket_by, write } => {
            let before = get_flag(conn, &key).await?;
            let mut after = before.clone();
            let mut variations = Vec::new();
            let mut total = 0u64;
            for w in &weights {
                let (v, pct) =
                    w.split_once('=').ok_or_else(|| invalid(format!("{w:?}: expected VARIATION=PERCENT")))?;
                let pct: f64 =
                    pct.parse().map_err(|_| invalid(format!("{w:?}: {pct:?} is not a percentage")))?;
                if !(0.0..=100.0).contains(&pct) {
                    return Err(invalid(format!("{w:?}: percentage must be 0..=100")));
                }
                let weight = (pct * 1000.0).round() as u32;
                total += u64::from(weight);
                variations.push(WeightedVariation { variation: variation_index(&before, v)?, weight });
            }
            if total != 100_000 {
                return Err(invalid(format!("weights sum to {}%, must be 100%", total as f64 / 1000.0)));
            }
            // A rollout already there keeps its kind, seed and bucketing
            // (an imported one its source's): new weights move contexts
            // only into the variations that grew.
            // No rollout yet: flagstream's own bucketing and the default
            // kind (`Rollout::default()`), which is what an absent one means.
            let prior = before.fallthrough.rollout.clone().unwrap_or_default(); // none: Rollout::default()
            after.fallthrough = Serve::rollout(Rollout { bucket_by, variations, ..prior });
            write_flag(conn, Some(&before), after, &write).await?;
        }
        FlagCmd::Target { key, variation, add, remove, write } => {
            if add.is_empty() && remove.is_empty() {
                return Err(invalid("nothing to do: pass --add and/or --remove"));
            }
            let before = get_flag(conn, &key).await?;
            let v = variation_index(&before, &variation)?;
            // The relay's patch does the work (a key added here leaves the
            // flag's other targets; an emptied target goes), so what is
            // stored is exactly what admin.proto promises.
            use pb::flag_patch::Op as P;
            let mut ops = Vec::new();
            if !add.is_empty() {
                let keys = pb::TargetKeys { variation: v, keys: add.clone(), ..Default::default() };
                ops.push(pb::FlagPatch { op: Some(P::AddTargets(keys)) });
            }
            if !remove.is_empty() {
                let keys = pb::TargetKeys { variation: v, keys: remove.clone(), ..Default::default() };
                ops.push(pb::FlagPatch { op: Some(P::RemoveTargets(keys)) });
            }
            eprintln!(
                "flag {key:?} in {}: variation {variation}: target [{}], untarget [{}]",
                conn.env,
                add.join(", "),
                remove.join(", ")
            );
            conn.confirm(&format!("patch the targets of flag {key:?}"))?;
            let r = {
                let req = pb::PatchFlagRequest {
                    environment: conn.env.clone(),
                    key: key.clone(),
                    expected_version: Some(before.version),
                    ops,
                    comment: write.comment.clone(),
                };
                with_retry(|| {
                    let (mut admin, req) = (conn.admin.clone(), req.clone());
                    async move { admin.patch_flag(req).await }
                })
                .await?
            }
            .into_inner();
            let after = r
                .flag
                .as_ref()
                .map(wire::flag_from_proto)
                .transpose()
                .map_err(|e| Failure::new(exit::ERROR, e.to_string()))?
                .ok_or_else(|| Failure::new(exit::ERROR, "the relay's PatchFlag response has no flag"))?;
            let (b, a) = (yaml_for_diff(Some(&strip_flag(before))), yaml_for_diff(Some(&strip_flag(after))));
            if a == b {
                println!("flag {key:?}: no change");
                return Ok(());
            }
            show_diff(&format!("flag {key:?} in {} (as stored):", conn.env), &b, &a);
            let revision = r.result.map_or(0, |r| r.revision);
            committed(conn, &format!("flag {key:?} written"), revision, write.wait, write.wait_timeout)
                .await?;
        }
        FlagCmd::Rule(RuleCmd::Add { key, id, clauses, serve, position, write }) => {
            let before = get_flag(conn, &key).await?;
            let mut after = before.clone();
            let rule = flagstream::model::Rule {
                id: id.clone(),
                clauses: clauses.iter().map(|c| parse_clause(c)).collect::<Result<_, _>>()?,
                serve: Serve::variation(variation_index(&before, &serve)?),
            };
            let at = position.unwrap_or(after.rules.len()).min(after.rules.len());
            after.rules.insert(at, rule);
            write_flag(conn, Some(&before), after, &write).await?;
        }
        FlagCmd::Rule(RuleCmd::Remove { key, id, write }) => {
            let before = get_flag(conn, &key).await?;
            let mut after = before.clone();
            after.rules.retain(|r| r.id != id);
            if after.rules.len() == before.rules.len() {
                return Err(Failure::new(
                    exit::NOT_FOUND,
                    format!("flag {key:?} has no rule with id {id:?}"),
                ));
            }
            write_flag(conn, Some(&before), after, &write).await?;
        }
        FlagCmd::Set { key, file, write } => {
            let after: Flag = read_file(&file)?;
            if after.key != key {
                return Err(invalid(format!("{}: holds flag {:?}, not {key:?}", file.display(), after.key)));
            }
            let before = match get_flag(conn, &key).await {
                Ok(f) => Some(f),
                Err(f) if f.code == exit::NOT_FOUND => None,
                Err(f) => return Err(f),
            };
            write_flag(conn, before.as_ref(), after, &write).await?;
        }
        FlagCmd::Delete { key, write } => {
            let before = get_flag(conn, &key).await?;
            show_diff(
                &format!("flag {key:?} in {}:", conn.env),
                &yaml_for_diff(Some(&strip_flag(before.clone()))),
                "",
            );
            conn.confirm(&format!("delete flag {key:?}"))?;
            let r = {
                let req = pb::DeleteFlagRequest {
                    environment: conn.env.clone(),
                    key: key.clone(),
                    expected_version: Some(before.version),
                    comment: write.comment.clone(),
                };
                with_retry(|| {
                    let (mut admin, req) = (conn.admin.clone(), req.clone());
                    async move { admin.delete_flag(req).await }
                })
                .await?
            }
            .into_inner();
            let revision = r.result.map_or(0, |r| r.revision);
            committed(conn, &format!("flag {key:?} deleted"), revision, write.wait, write.wait_timeout)
                .await?;
        }
        FlagCmd::History { key, limit, diff } => history(conn, pb::ItemKind::Flag, &key, limit, diff).await?,
        FlagCmd::Usage { key } => crate::usage::usage(conn, key).await?,
        FlagCmd::Stale { days } => crate::usage::stale(conn, days).await?,
    }
    Ok(())
}

async fn set_on(conn: &mut Conn, key: &str, on: bool, w: &WriteArgs) -> CmdResult {
    let before = get_flag(conn, key).await?;
    let mut after = before.clone();
    after.on = on;
    write_flag(conn, Some(&before), after, w).await
}

async fn history(conn: &mut Conn, kind: pb::ItemKind, key: &str, limit: u32, diff: bool) -> CmdResult {
    let r = conn
        .admin
        .list_audit(pb::ListAuditRequest {
            environment: conn.env.clone(),
            key: key.into(),
            item_kind: kind as i32,
            limit,
            page_token: String::new(),
        })
        .await?
        .into_inner();
    let rows: Vec<_> = r
        .entries
        .iter()
        .map(|e| {
            let action = match pb::AuditAction::try_from(e.action) {
                Ok(pb::AuditAction::Create) => "create",
                Ok(pb::AuditAction::Delete) => "delete",
                _ => "update",
            };
            (e, action)
        })
        .collect();
    if conn.output == Output::Table {
        let mut t = comfy_table::Table::new();
        t.load_preset(comfy_table::presets::NOTHING);
        t.set_header(["REVISION", "WHEN (UNIX MS)", "ACTOR", "ACTION", "VERSION", "COMMENT"]);
        for (e, action) in &rows {
            t.add_row([
                e.revision.to_string(),
                e.time_unix_ms.to_string(),
                e.actor.clone(),
                (*action).to_owned(),
                format!("{} -> {}", e.version_before, e.version_after),
                e.comment.clone(),
            ]);
        }
        println!("{t}");
        if diff {
            for (e, action) in &rows {
                println!("\nrevision {} ({action} by {}):\n{}", e.revision, e.actor, e.diff);
            }
        }
    } else {
        let v: Vec<_> = rows
            .iter()
            .map(|(e, action)| serde_json::json!({"revision": e.revision, "time_unix_ms": e.time_unix_ms, "actor": e.actor, "action": action, "version_before": e.version_before, "version_after": e.version_after, "comment": e.comment, "diff": e.diff}))
            .collect();
        print_data(conn.output, &v)?;
    }
    Ok(())
}
