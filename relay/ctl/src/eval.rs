//! `flagctl eval`: evaluates a flag at the relay for a context given on the
//! command line (key, kind, attributes), showing the value, the variation
//! and why — the same evaluation SDKs run.

use clap::Args;
use flagstream_proto::v1 as pb;

use flagstream::wire;
use serde_json::Value as Json;

use crate::conn::Conn;
use crate::failure::{CmdResult, Failure, exit, invalid};
use crate::output::{Output, print_data};

/// `eval` options.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Flag key.
    pub flag: String,
    /// Context key.
    #[arg(long)]
    pub key: String,
    /// Context kind.
    #[arg(long, default_value = "")]
    pub kind: String,
    /// Attributes as NAME=VALUE (numbers, true/false and [a,b] lists are typed).
    #[arg(long = "attr")]
    pub attrs: Vec<String>,
}

fn attr_value(s: &str) -> flagstream::AttrValue<'static> {
    if let Some(list) = s.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
        let items: Vec<flagstream::Scalar<'static>> = list.split(',').map(|i| scalar(i.trim())).collect();
        return flagstream::AttrValue::from(items);
    }
    flagstream::AttrValue::Scalar(scalar(s))
}

fn scalar(s: &str) -> flagstream::Scalar<'static> {
    if let Ok(b) = s.parse::<bool>() {
        flagstream::Scalar::Bool(b)
    } else if let Ok(n) = s.parse::<f64>() {
        flagstream::Scalar::Num(n)
    } else {
        flagstream::Scalar::Str(s.to_owned().into())
    }
}

/// `eval`: evaluates on the relay and prints value, variation and reason.
pub(crate) async fn eval(conn: &mut Conn, a: EvalArgs) -> CmdResult {
    let mut ctx = flagstream::Context::new(a.key.clone()).kind(a.kind.clone());
    for attr in &a.attrs {
        let (name, value) =
            attr.split_once('=').ok_or_else(|| invalid(format!("--attr {attr:?}: expected NAME=VALUE")))?;
        ctx.set(name.to_owned(), attr_value(value));
    }
    let r = conn
        .admin
        .evaluate(pb::EvaluateRequest {
            environment: conn.env.clone(),
            flag_key: a.flag.clone(),
            context: Some(wire::context_to_proto(&ctx)),
            requested_type: 0,
            default_value: None,
        })
        .await?
        .into_inner();
    let value = match r.value.as_ref().filter(|v| v.value.is_some()) {
        Some(v) => wire::variation_from_proto(v)
            .map_err(|e| Failure::new(exit::ERROR, format!("the relay sent a bad value: {e}")))?,
        None => Json::Null,
    };
    // A relay that sent no reason: UNSPECIFIED, printed as such.
    let reason = r.reason.unwrap_or_default();
    let kind = pb::ReasonKind::try_from(reason.kind)
        .map_or("UNKNOWN".to_owned(), |k| k.as_str_name().trim_start_matches("REASON_KIND_").to_owned());
    let mut detail = String::new();
    if !reason.rule_id.is_empty() || kind == "RULE_MATCH" {
        detail = format!(" (rule {} {:?})", reason.rule_index, reason.rule_id);
    }
    // 1-based; 0 before the ramp's first step.
    match reason.schedule_step {
        Some(0) => detail.push_str(" (ramp not started)"),
        Some(step) => detail.push_str(&format!(" (ramp step {step})")),
        None => {}
    }
    if !reason.prerequisite_key.is_empty() {
        detail = format!(" (prerequisite {:?})", reason.prerequisite_key);
    }
    if kind == "ERROR" {
        let e = pb::ErrorKind::try_from(reason.error)
            .map_or("UNKNOWN".to_owned(), |k| k.as_str_name().trim_start_matches("ERROR_KIND_").to_owned());
        detail = format!(" ({e})");
    }
    match conn.output {
        Output::Table => {
            println!("value      {value}");
            println!("variation  {}", r.variation_index.map_or("-".to_owned(), |v| v.to_string()));
            println!("reason     {kind}{detail}");
            println!("version    {} (revision {})", r.flag_version, r.revision);
        }
        o => print_data(
            o,
            &serde_json::json!({"value": value, "variation": r.variation_index, "reason": kind, "detail": detail.trim(), "flag_version": r.flag_version, "revision": r.revision}),
        )?,
    }
    if kind == "ERROR" {
        let code =
            if reason.error == pb::ErrorKind::FlagNotFound as i32 { exit::NOT_FOUND } else { exit::INVALID };
        return Err(Failure::new(code, format!("flag {:?}: {}", a.flag, detail.trim())));
    }
    Ok(())
}
