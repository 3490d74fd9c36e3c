//! `flagctl env`: create, list and delete environments; set the web
//! origins allowed to call OFREP (CORS).

use clap::Subcommand;
use flagstream_proto::v1 as pb;

use crate::conn::Conn;
use crate::failure::CmdResult;
use crate::output::{Output, print_data};

/// `env` subcommands.
#[derive(Debug, Subcommand)]
pub enum EnvCmd {
    /// Create an environment; prints its SDK key once.
    Create {
        /// Name.
        name: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List environments.
    List,
    /// Delete an environment and everything in it.
    Delete {
        /// Name.
        name: String,
    },
    /// Show or replace the web origins whose pages may call OFREP with
    /// the environment's keys (CORS): `env cors prod --allow
    /// https://app.example.com --allow http://localhost:3000`; `--clear`
    /// allows none; neither shows them.
    Cors {
        /// Name.
        name: String,
        /// An origin, `scheme://host[:port]` (repeat it), or `*` for any.
        /// Replaces the list.
        #[arg(long = "allow", conflicts_with = "clear")]
        allow: Vec<String>,
        /// Remove every origin.
        #[arg(long)]
        clear: bool,
    },
}

pub(crate) async fn env_cmd(conn: &mut Conn, cmd: EnvCmd) -> CmdResult {
    match cmd {
        EnvCmd::Create { name, description } => {
            let r = conn
                .admin
                .create_environment(pb::CreateEnvironmentRequest { name: name.clone(), description })
                .await?
                .into_inner();
            println!("created environment {name}");
            println!("SDK key (shown once): {}", r.sdk_key);
        }
        EnvCmd::List => {
            let envs = environments(conn).await?;
            match conn.output {
                Output::Table => {
                    let mut t = comfy_table::Table::new();
                    t.load_preset(comfy_table::presets::NOTHING);
                    t.set_header(["NAME", "REVISION", "FLAGS", "SEGMENTS", "EPOCH", "CORS ORIGINS"]);
                    for e in &envs {
                        t.add_row([
                            e.name.clone(),
                            e.revision.to_string(),
                            e.flag_count.to_string(),
                            e.segment_count.to_string(),
                            e.epoch.clone(),
                            e.cors_origins.join(","),
                        ]);
                    }
                    println!("{t}");
                }
                o => {
                    let v: Vec<_> = envs
                        .iter()
                        .map(|e| serde_json::json!({"name": e.name, "revision": e.revision, "flags": e.flag_count, "segments": e.segment_count, "epoch": e.epoch, "cors_origins": e.cors_origins}))
                        .collect();
                    print_data(o, &v)?;
                }
            }
        }
        EnvCmd::Delete { name } => {
            conn.confirm(&format!("delete environment {name:?} and all its flags"))?;
            let r = conn
                .admin
                .delete_environment(pb::DeleteEnvironmentRequest {
                    name: name.clone(),
                    expected_revision: None,
                })
                .await?
                .into_inner();
            println!("deleted environment {name}");
            if !r.audit_archive.is_empty() {
                println!(
                    "its audit log is kept as {0} (flagctl -e {0} audit verify | audit log)",
                    r.audit_archive
                );
            }
        }
        EnvCmd::Cors { name, allow, clear } => {
            if allow.is_empty() && !clear {
                let Some(e) = environments(conn).await?.into_iter().find(|e| e.name == name) else {
                    return Err(crate::failure::Failure::new(
                        crate::failure::exit::NOT_FOUND,
                        format!("no environment {name:?}"),
                    ));
                };
                return show_origins(conn.output, &e.cors_origins);
            }
            conn.confirm(&format!("set the CORS origins of {name:?} to {allow:?}"))?;
            let r = conn
                .admin
                .set_cors_origins(pb::SetCorsOriginsRequest { environment: name, origins: allow })
                .await?
                .into_inner();
            show_origins(conn.output, &r.origins)?;
        }
    }
    Ok(())
}

/// Every environment, as the relay lists them.
async fn environments(conn: &mut Conn) -> Result<Vec<pb::Environment>, crate::failure::Failure> {
    Ok(conn.admin.list_environments(pb::ListEnvironmentsRequest::default()).await?.into_inner().environments)
}

fn show_origins(output: Output, origins: &[String]) -> CmdResult {
    match output {
        Output::Table if origins.is_empty() => println!("(no origin may call OFREP from a browser)"),
        Output::Table => origins.iter().for_each(|o| println!("{o}")),
        o => print_data(o, &origins)?,
    }
    Ok(())
}
