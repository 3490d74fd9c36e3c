//! OFREP's answers: one flag's evaluation (`POST
//! /ofrep/v1/evaluate/flags/{key}`) and every flag's (`POST
//! /ofrep/v1/evaluate/flags`), as the OFREP OpenAPI document shapes them,
//! and the bulk answer's ETag. Pure: a snapshot, a context and who asks
//! in, a status and a JSON body out.
//!
//! Who asks: a server-side SDK key sees every flag; a client-side key
//! ([`Viewer::Client`]) sees only flags with `client_visible` set, and any
//! other flag answers it exactly as a flag that does not exist (the same
//! status and body, and absent from the bulk answer, so from its ETag).

use std::borrow::Cow;

use flagstream::{Context, ErrorKind, FlagType, Reason, Snapshot};
use hyper::StatusCode;
use serde_json::{Map, Value as Json, json};
use sha2::{Digest, Sha256};

/// Who a request is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Viewer {
    /// A server-side SDK key: every flag.
    Server,
    /// A client-side key: flags visible to clients only.
    Client,
}

impl Viewer {
    /// Whether it may see `flag`.
    pub(crate) fn sees(self, flag: &flagstream::Flag) -> bool {
        self == Viewer::Server || flag.client_visible
    }
}

/// The single-flag answer: 200 with the evaluation; 404 `FLAG_NOT_FOUND`;
/// 400 `PARSE_ERROR` for a flag that cannot be evaluated.
pub(crate) fn single(snap: &Snapshot, key: &str, ctx: &Context<'_>, viewer: Viewer) -> (StatusCode, Json) {
    match evaluate(snap, key, ctx, viewer) {
        Ok(v) => (StatusCode::OK, v),
        Err((status, body)) => (status, body),
    }
}

/// Every flag's evaluation for one context, sorted by key (a flag that
/// cannot be evaluated is an item with its error), and the ETag of those
/// results: it changes when any result does (a new revision that changes
/// one, a schedule step that moves with the clock) and not otherwise.
pub(crate) fn bulk(snap: &Snapshot, ctx: &Context<'_>, advertised: &str, viewer: Viewer) -> (Json, String) {
    let mut keys: Vec<&str> = snap.flags().filter(|f| viewer.sees(f)).map(|f| f.key.as_str()).collect();
    keys.sort_unstable();
    let flags: Vec<Json> = keys
        .into_iter()
        .map(|key| match evaluate(snap, key, ctx, viewer) {
            Ok(v) => v,
            Err((_, body)) => body,
        })
        .collect();
    let tag = etag(&flags, advertised);
    (json!({ "flags": flags }), tag)
}

/// A strong ETag over the results (each item without its `metadata`: a
/// write to one flag bumps only its version, and must not change the tag
/// of a client whose results stay the same) and what else the answer
/// advertises (`advertised`: the change stream's URI), in canonical JSON
/// (`serde_json` writes object members in key order).
fn etag(items: &[Json], advertised: &str) -> String {
    let mut h = Sha256::new();
    for item in items {
        let mut item = item.clone();
        if let Some(m) = item.as_object_mut() {
            m.remove("metadata");
        }
        h.update(item.to_string().as_bytes());
        h.update(b"\n");
    }
    h.update(advertised.as_bytes());
    format!("\"{}\"", hex::encode(&h.finalize()[..16]))
}

/// Whether an `If-None-Match` header names `etag` (a list, weak or
/// strong, or `*`).
pub(crate) fn not_modified(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

/// One flag's evaluation body, or its failure's status and body.
fn evaluate(
    snap: &Snapshot,
    key: &str,
    ctx: &Context<'_>,
    viewer: Viewer,
) -> Result<Json, (StatusCode, Json)> {
    let Some(flag) = snap.flag(key).filter(|f| viewer.sees(f)) else {
        return Err((StatusCode::NOT_FOUND, failure(key, "FLAG_NOT_FOUND", format!("no flag {key:?}"))));
    };
    let flag_type = flag.flag_type;
    let d = snap.detail::<Cow<'_, Json>>(key, ctx, Cow::Owned(Json::Null));
    match d.reason {
        Reason::Error(ErrorKind::FlagNotFound) => {
            Err((StatusCode::NOT_FOUND, failure(key, "FLAG_NOT_FOUND", format!("no flag {key:?}"))))
        }
        Reason::Error(kind) => Err((
            StatusCode::BAD_REQUEST,
            failure(key, "PARSE_ERROR", format!("flag {key:?} cannot be evaluated: {}", kind.name())),
        )),
        reason => {
            let mut body = Map::new();
            body.insert("key".into(), Json::from(key));
            body.insert("value".into(), typed(flag_type, d.value.into_owned()));
            body.insert("reason".into(), Json::from(reason.openfeature_name()));
            if let Some(v) = d.variation {
                body.insert("variant".into(), Json::from(v.to_string()));
            }
            body.insert("metadata".into(), json!({ "flagVersion": d.flag_version }));
            Ok(Json::Object(body))
        }
    }
}

/// A value as its flag's type says: a number flag's whole numbers as
/// floats (`1.0`), as OpenFeature's typed providers check them.
fn typed(flag_type: FlagType, v: Json) -> Json {
    match (flag_type, &v) {
        (FlagType::Float, Json::Number(n)) => n.as_f64().map_or(v.clone(), Json::from),
        _ => v,
    }
}

/// An evaluation failure's body (`evaluationFailure`, `flagNotFound`).
pub(crate) fn failure(key: &str, code: &str, details: String) -> Json {
    json!({ "key": key, "errorCode": code, "errorDetails": details })
}

#[cfg(test)]
mod tests {
    use flagstream::{FlagSet, Limits};

    use super::*;

    fn snap(yaml: &str) -> Snapshot {
        let set: FlagSet = serde_yaml_ng::from_str(yaml).unwrap();
        Snapshot::compile(&set, &Limits::default()).unwrap()
    }

    const FLAGS: &str = r#"
flags:
  - {key: ratio, type: float, variations: [1, 2.5], on: true, off_variation: 0, fallthrough: {variation: 0}}
  - {key: gate, type: bool, variations: [true, false], on: true, off_variation: 1,
     rules: [{id: pro, clauses: [{attribute: plan, op: in, values: [pro]}], serve: {variation: 0}}],
     fallthrough: {variation: 1}}
  - {key: dark, type: bool, variations: [true, false], on: false, off_variation: 1, fallthrough: {variation: 0}}
"#;

    #[test]
    fn single_answers_shapes_and_statuses() {
        let s = snap(FLAGS);
        let pro = Context::new("u1").with("plan", "pro");
        let (status, body) = single(&s, "gate", &pro, Viewer::Server);
        assert_eq!(status, StatusCode::OK);
        assert_eq!(
            body,
            json!({"key": "gate", "value": true, "reason": "TARGETING_MATCH", "variant": "0", "metadata": {"flagVersion": 0}})
        );
        assert_eq!(single(&s, "dark", &pro, Viewer::Server).1["reason"], "DISABLED");
        assert_eq!(single(&s, "gate", &Context::new("u2"), Viewer::Server).1["reason"], "DEFAULT");
        let ratio = single(&s, "ratio", &pro, Viewer::Server).1;
        assert_eq!(ratio["value"].to_string(), "1.0", "a number flag's whole value is a float");
        let (status, body) = single(&s, "nope", &pro, Viewer::Server);
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["errorCode"], "FLAG_NOT_FOUND");
    }

    #[test]
    fn the_bulk_etag_follows_the_results_only() {
        let s = snap(FLAGS);
        let (body, tag) = bulk(&s, &Context::new("u1"), "/events?a", Viewer::Server);
        assert_eq!(body["flags"].as_array().map(Vec::len), Some(3));
        assert_eq!(body["flags"][0]["key"], "dark", "sorted by key");
        // Another context with the same results: the same tag.
        assert_eq!(bulk(&s, &Context::new("u2"), "/events?a", Viewer::Server).1, tag);
        // A result that differs: another tag; so does another stream URI.
        assert_ne!(bulk(&s, &Context::new("u1").with("plan", "pro"), "/events?a", Viewer::Server).1, tag);
        assert_ne!(bulk(&s, &Context::new("u1"), "/events?b", Viewer::Server).1, tag);
        // Another flag's new version with the same results: the same tag.
        let mut set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
        set.flags[0].version += 1;
        let bumped = Snapshot::compile(&set, &Limits::default()).unwrap();
        assert_eq!(bulk(&bumped, &Context::new("u1"), "/events?a", Viewer::Server).1, tag);
        assert!(not_modified(&format!("W/{tag}, \"x\""), &tag));
        assert!(!not_modified("\"x\"", &tag));
    }

    #[test]
    fn a_client_key_sees_hidden_flags_as_missing() {
        let mut set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
        set.flags[1].client_visible = true; // gate
        let s = Snapshot::compile(&set, &Limits::default()).unwrap();
        let pro = Context::new("u1").with("plan", "pro");
        assert_eq!(single(&s, "gate", &pro, Viewer::Client), single(&s, "gate", &pro, Viewer::Server));
        // A hidden flag: byte for byte what a missing one answers.
        let hidden = single(&s, "dark", &pro, Viewer::Client);
        let mut missing = single(&s, "nope", &pro, Viewer::Client);
        missing.1["key"] = json!("dark");
        missing.1["errorDetails"] = json!("no flag \"dark\"");
        assert_eq!(hidden, missing);
        let (body, tag) = bulk(&s, &pro, "/events?a", Viewer::Client);
        let keys: Vec<&str> =
            body["flags"].as_array().unwrap().iter().map(|f| f["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["gate"]);
        // A change to a hidden flag leaves the client's tag alone.
        set.flags[2].on = true;
        let changed = Snapshot::compile(&set, &Limits::default()).unwrap();
        assert_eq!(bulk(&changed, &pro, "/events?a", Viewer::Client).1, tag);
        assert_ne!(
            bulk(&changed, &pro, "/events?a", Viewer::Server).1,
            bulk(&s, &pro, "/events?a", Viewer::Server).1
        );
    }
}
