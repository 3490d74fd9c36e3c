//! `flagctl key`, `flagctl token` and `flagctl audit`: SDK keys of an
//! environment, named admin tokens, and the audit chain check. Secrets are
//! printed once, to stdout only, and never logged.

use std::time::Duration;

use clap::{Subcommand, ValueEnum};
use flagstream_proto::v1 as pb;

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit};
use crate::output::{Output, print_data};

/// `key` subcommands (all with `-e ENV`).
#[derive(Debug, Subcommand)]
pub enum KeyCmd {
    /// Create another SDK key; prints its secret once.
    Create {
        /// Name (e.g. the service that will use it).
        #[arg(long, default_value = "")]
        name: String,
        /// A client-side key (`fs_client_...`) for browsers and apps: it
        /// may only call OFREP and sees only flags visible to clients.
        #[arg(long)]
        client: bool,
    },
    /// List the environment's SDK keys (never their secrets).
    List,
    /// Replace a key: prints the new secret once; the old key keeps working
    /// for the grace period, then its streams end.
    Rotate {
        /// Key id (`k1`, ...).
        id: String,
        /// How long the old key keeps working (e.g. 10m, 1h; 0s: not at all).
        #[arg(long, value_parser = humantime::parse_duration)]
        grace: Duration,
        /// Name of the new key [default: the old key's].
        #[arg(long, default_value = "")]
        name: String,
    },
    /// Revoke a key at once: its open streams end.
    Revoke {
        /// Key id.
        id: String,
    },
}

/// A token's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// Read flags, segments, audit, propagation, status; evaluate.
    Read,
    /// Read, and write flags and segments (apply).
    Write,
    /// Everything on its environments (with all: environments and tokens).
    Admin,
}

/// `token` subcommands.
#[derive(Debug, Subcommand)]
pub enum TokenCmd {
    /// Create a named admin token; prints its secret once. Its
    /// environments are the `--env` values (repeat it); none: all.
    Create {
        /// Name; recorded as the principal of every write made with it.
        name: String,
        /// Role.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Allow following every environment as a replica relay.
        #[arg(long)]
        replicate: bool,
    },
    /// List tokens (never their secrets).
    List,
    /// Revoke a token at once.
    Revoke {
        /// Name.
        name: String,
    },
}

/// `audit` subcommands (with `-e ENV`).
#[derive(Debug, Subcommand)]
pub enum AuditCmd {
    /// Check the environment's audit hash chain; exits 9 naming the first
    /// broken record if it does not hold.
    Verify,
    /// The newest audit entries of the environment (item changes and SDK
    /// key and environment events), newest first.
    Log {
        /// Most entries to show (the relay caps a page at 1000).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Also print each entry's diff or details.
        #[arg(long)]
        diff: bool,
    },
}

/// An audit action's name as flagctl prints it.
fn action_name(action: i32) -> &'static str {
    match pb::AuditAction::try_from(action) {
        Ok(pb::AuditAction::Create) => "create",
        Ok(pb::AuditAction::Update) => "update",
        Ok(pb::AuditAction::Delete) => "delete",
        Ok(pb::AuditAction::SdkKeyCreate) => "sdk_key.create",
        Ok(pb::AuditAction::SdkKeyRotate) => "sdk_key.rotate",
        Ok(pb::AuditAction::SdkKeyRevoke) => "sdk_key.revoke",
        Ok(pb::AuditAction::EnvironmentCreate) => "environment.create",
        Ok(pb::AuditAction::EnvironmentDelete) => "environment.delete",
        Ok(pb::AuditAction::TokenCreate) => "token.create",
        Ok(pb::AuditAction::TokenRevoke) => "token.revoke",
        Ok(pb::AuditAction::CorsOriginsSet) => "environment.cors",
        _ => "unknown",
    }
}

fn table(header: &[&str], rows: Vec<Vec<String>>) {
    let mut t = comfy_table::Table::new();
    t.load_preset(comfy_table::presets::NOTHING);
    t.set_header(header);
    for r in rows {
        t.add_row(r);
    }
    println!("{t}");
}

fn key_json(k: &pb::SdkKey) -> serde_json::Value {
    serde_json::json!({"id": k.id, "name": k.name, "client": k.client, "created_unix_ms": k.created_unix_ms,
        "expires_unix_ms": k.expires_unix_ms, "created_by": k.created_by})
}

fn print_secret(conn: &Conn, what: &str, secret: &str, extra: serde_json::Value) -> CmdResult {
    if conn.output == Output::Table {
        eprintln!("{what}; the secret is shown only now (stored as a hash):");
        println!("{secret}");
        Ok(())
    } else {
        let mut v = extra;
        v["secret"] = serde_json::Value::String(secret.to_owned());
        print_data(conn.output, &v)
    }
}

/// Runs a `key` subcommand.
pub(crate) async fn key_cmd(conn: &mut Conn, cmd: KeyCmd) -> CmdResult {
    let environment = conn.env.clone();
    match cmd {
        KeyCmd::Create { name, client } => {
            let r = conn
                .admin
                .create_sdk_key(pb::CreateSdkKeyRequest { environment, name, client })
                .await?
                .into_inner();
            let key = r.key.unwrap_or_default();
            let kind = if key.client { "client-side key" } else { "SDK key" };
            print_secret(
                conn,
                &format!("{kind} {} created in {}", key.id, conn.env),
                &r.secret,
                key_json(&key),
            )
        }
        KeyCmd::List => {
            let r = conn.admin.list_sdk_keys(pb::ListSdkKeysRequest { environment }).await?.into_inner();
            if conn.output == Output::Table {
                let rows = r
                    .keys
                    .iter()
                    .map(|k| {
                        let expires = if k.expires_unix_ms == 0 {
                            "-".to_owned()
                        } else {
                            k.expires_unix_ms.to_string()
                        };
                        vec![
                            k.id.clone(),
                            if k.client { "client" } else { "server" }.to_owned(),
                            k.name.clone(),
                            k.created_by.clone(),
                            k.created_unix_ms.to_string(),
                            expires,
                        ]
                    })
                    .collect();
                table(&["ID", "KIND", "NAME", "CREATED BY", "CREATED (UNIX MS)", "EXPIRES (UNIX MS)"], rows);
                Ok(())
            } else {
                print_data(conn.output, &r.keys.iter().map(key_json).collect::<Vec<_>>())
            }
        }
        KeyCmd::Rotate { id, grace, name } => {
            conn.confirm(&format!("rotate SDK key {id} of {} (old key works {grace:?} more)", conn.env))?;
            let req = pb::RotateSdkKeyRequest {
                environment,
                id: id.clone(),
                grace_ms: grace.as_millis() as u64,
                name,
            };
            let r = conn.admin.rotate_sdk_key(req).await?.into_inner();
            let key = r.key.unwrap_or_default();
            let old = match &r.old {
                Some(o) => format!("{id} works until {} (Unix ms)", o.expires_unix_ms),
                None => format!("{id} is revoked"),
            };
            print_secret(conn, &format!("SDK key {} replaces {id}; {old}", key.id), &r.secret, key_json(&key))
        }
        KeyCmd::Revoke { id } => {
            conn.confirm(&format!("revoke SDK key {id} of {} (its streams end now)", conn.env))?;
            conn.admin.revoke_sdk_key(pb::RevokeSdkKeyRequest { environment, id: id.clone() }).await?;
            println!("SDK key {id} of {} revoked", conn.env);
            Ok(())
        }
    }
}

fn role_name(r: i32) -> &'static str {
    match pb::TokenRole::try_from(r) {
        Ok(pb::TokenRole::Read) => "read",
        Ok(pb::TokenRole::Write) => "write",
        Ok(pb::TokenRole::Admin) => "admin",
        _ => "?",
    }
}

fn token_json(t: &pb::Token) -> serde_json::Value {
    serde_json::json!({"name": t.name, "role": role_name(t.role), "environments": t.environments,
        "replicate": t.replicate, "created_unix_ms": t.created_unix_ms, "created_by": t.created_by})
}

/// Runs a `token` subcommand; `environments` are the `--env` values.
pub(crate) async fn token_cmd(conn: &mut Conn, cmd: TokenCmd, environments: Vec<String>) -> CmdResult {
    match cmd {
        TokenCmd::Create { name, role, replicate } => {
            let role = match role {
                RoleArg::Read => pb::TokenRole::Read,
                RoleArg::Write => pb::TokenRole::Write,
                RoleArg::Admin => pb::TokenRole::Admin,
            } as i32;
            let req = pb::CreateTokenRequest { name, role, environments, replicate };
            let r = conn.admin.create_token(req).await?.into_inner();
            let t = r.token.unwrap_or_default();
            let scope = if t.environments.is_empty() {
                "all environments".to_owned()
            } else {
                t.environments.join(", ")
            };
            let what = format!("token {:?} created: role {} on {scope}", t.name, role_name(t.role));
            print_secret(conn, &what, &r.secret, token_json(&t))
        }
        TokenCmd::List => {
            let r = conn.admin.list_tokens(pb::ListTokensRequest {}).await?.into_inner();
            if conn.output == Output::Table {
                let rows = r
                    .tokens
                    .iter()
                    .map(|t| {
                        let envs =
                            if t.environments.is_empty() { "*".to_owned() } else { t.environments.join(",") };
                        vec![
                            t.name.clone(),
                            role_name(t.role).to_owned(),
                            envs,
                            if t.replicate { "yes" } else { "no" }.to_owned(),
                            t.created_by.clone(),
                        ]
                    })
                    .collect();
                table(&["NAME", "ROLE", "ENVIRONMENTS", "REPLICATE", "CREATED BY"], rows);
                Ok(())
            } else {
                print_data(conn.output, &r.tokens.iter().map(token_json).collect::<Vec<_>>())
            }
        }
        TokenCmd::Revoke { name } => {
            conn.confirm(&format!("revoke admin token {name:?}"))?;
            conn.admin.revoke_token(pb::RevokeTokenRequest { name: name.clone() }).await?;
            println!("token {name:?} revoked");
            Ok(())
        }
    }
}

/// Runs an `audit` subcommand.
pub(crate) async fn audit_cmd(conn: &mut Conn, cmd: AuditCmd) -> CmdResult {
    match cmd {
        AuditCmd::Verify => {
            let r = conn
                .admin
                .verify_audit(pb::VerifyAuditRequest { environment: conn.env.clone() })
                .await?
                .into_inner();
            if r.ok {
                println!("audit chain of {} holds: {} records verified", conn.env, r.records_checked);
                Ok(())
            } else {
                Err(Failure::new(
                    exit::BROKEN_CHAIN,
                    format!(
                        "audit chain of {} broken at record {}: {} ({} records checked)",
                        conn.env, r.first_broken, r.problem, r.records_checked
                    ),
                ))
            }
        }
        AuditCmd::Log { limit, diff } => {
            let r = conn
                .admin
                .list_audit(pb::ListAuditRequest {
                    environment: conn.env.clone(),
                    limit,
                    ..Default::default()
                })
                .await?
                .into_inner();
            let subject = |e: &pb::AuditEntry| match pb::ItemKind::try_from(e.item_kind) {
                Ok(pb::ItemKind::Flag) => format!("flag {}", e.key),
                Ok(pb::ItemKind::Segment) => format!("segment {}", e.key),
                _ => e.key.clone(),
            };
            if conn.output == Output::Table {
                let rows = r
                    .entries
                    .iter()
                    .map(|e| {
                        vec![
                            e.revision.to_string(),
                            e.time_unix_ms.to_string(),
                            e.actor.clone(),
                            action_name(e.action).to_owned(),
                            subject(e),
                            e.comment.clone(),
                        ]
                    })
                    .collect();
                table(&["REVISION", "WHEN (UNIX MS)", "ACTOR", "ACTION", "SUBJECT", "COMMENT"], rows);
                if diff {
                    for e in &r.entries {
                        println!(
                            "\nrevision {} ({} {} by {}):\n{}",
                            e.revision,
                            action_name(e.action),
                            subject(e),
                            e.actor,
                            e.diff
                        );
                    }
                }
            } else {
                let v: Vec<_> = r
                    .entries
                    .iter()
                    .map(|e| {
                        serde_json::json!({"revision": e.revision, "time_unix_ms": e.time_unix_ms,
                            "actor": e.actor, "action": action_name(e.action), "subject": subject(e),
                            "comment": e.comment, "on_behalf_of": e.on_behalf_of, "hash": e.hash,
                            "diff": if diff { e.diff.clone() } else { String::new() }})
                    })
                    .collect();
                print_data(conn.output, &v)?;
            }
            Ok(())
        }
    }
}
