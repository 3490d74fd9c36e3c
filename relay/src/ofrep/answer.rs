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
    pub(crate) fn sees(self, flag: &flagstream::FlagInfo) -> bool {
        self == Viewer::Server || flag.client_visible
    }
}

/// The single-flag answer: 200 with the evaluation; 404 `FLAG_NOT_FOUND`;
/// 400 `PARSE_ERROR` for a flag that cannot be evaluated.
pub(crate) fn single(snap: &Snapshot, key: &str, ctx: &Context<'_>, viewer: Viewer) -> (StatusCode, Json) {
    match evaluate(snap, key, ctx, viewer) {
        Ok(a) => (StatusCode::OK, a.to_json()),
        Err((status, body)) => (status, body),
    }
}

/// Every flag's evaluation for one context, as the bulk answer's JSON
/// body (`{"flags": [...], "eventStreams": [...]}`; items sorted by key, a
/// flag that cannot be evaluated an item with its error), and the ETag of
/// those results: it changes when any result does (a new revision that
/// changes one, a schedule step that moves with the clock) and not
/// otherwise. `advertised` is the change stream's request URI; `served`
/// is told each evaluated flag's key and variation (for usage).
///
/// Written straight into the body, item by item, with the hash fed from
/// the same bytes: a bulk answer of 50 flags allocates a few buffers, not
/// a tree of JSON values.
pub(crate) fn bulk<'s>(
    snap: &'s Snapshot,
    ctx: &Context<'_>,
    advertised: &str,
    viewer: Viewer,
    mut served: impl FnMut(&'s str, Option<u32>),
) -> (Vec<u8>, String) {
    let mut keys: Vec<&str> = snap.keys().filter(|k| snap.info(k).is_some_and(|f| viewer.sees(&f))).collect();
    keys.sort_unstable();
    let mut body = Vec::with_capacity(keys.len() * 128 + 256);
    body.extend_from_slice(b"{\"flags\":[");
    let mut hash = Sha256::new();
    let mut item = Vec::with_capacity(256);
    for (i, key) in keys.into_iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        item.clear();
        match evaluate(snap, key, ctx, viewer) {
            Ok(a) => {
                // Everything but `metadata` is hashed (a write to one flag
                // bumps only its version, and must not change the tag of a
                // client whose results stay the same).
                a.write_result(&mut item);
                hash.update(&item);
                body.extend_from_slice(&item);
                body.extend_from_slice(
                    format!(",\"metadata\":{{\"flagVersion\":{}}}}}", a.flag_version).as_bytes(),
                );
                served(key, a.variation);
            }
            Err((_, failure)) => {
                write_json(&mut item, &failure);
                hash.update(&item);
                body.extend_from_slice(&item);
            }
        }
        hash.update(b"\n");
    }
    hash.update(advertised.as_bytes());
    body.extend_from_slice(b"],\"eventStreams\":[{\"type\":\"sse\",\"endpoint\":{\"requestUri\":");
    write_json(&mut body, advertised);
    body.extend_from_slice(b"},\"inactivityDelaySec\":120}]}");
    (body, format!("\"{}\"", hex::encode(&hash.finalize()[..16])))
}

/// Appends `v` as JSON.
fn write_json(out: &mut Vec<u8>, v: &(impl serde::Serialize + ?Sized)) {
    // Writing JSON into a Vec fails only for a map with non-string keys,
    // which no answer has.
    if let Err(e) = serde_json::to_writer(&mut *out, v) {
        tracing::error!(error = %e, "an OFREP answer could not be written");
    }
}

/// Whether an `If-None-Match` header names `etag` (a list, weak or
/// strong, or `*`).
pub(crate) fn not_modified(if_none_match: &str, etag: &str) -> bool {
    if_none_match.split(',').map(str::trim).any(|t| t == "*" || t.trim_start_matches("W/") == etag)
}

/// One flag's evaluation.
pub(crate) struct Answer<'s> {
    key: &'s str,
    value: Cow<'s, Json>,
    reason: &'static str,
    variation: Option<u32>,
    flag_version: u64,
}

impl Answer<'_> {
    /// `{"key":…,"value":…,"reason":…,"variant":…` (no `metadata`, no
    /// closing brace).
    fn write_result(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"key\":");
        write_json(out, self.key);
        out.extend_from_slice(b",\"value\":");
        write_json(out, self.value.as_ref());
        out.extend_from_slice(b",\"reason\":\"");
        out.extend_from_slice(self.reason.as_bytes());
        out.push(b'"');
        if let Some(v) = self.variation {
            out.extend_from_slice(format!(",\"variant\":\"{v}\"").as_bytes());
        }
    }

    /// The single-flag answer's body.
    fn to_json(&self) -> Json {
        let mut body = Map::new();
        body.insert("key".into(), Json::from(self.key));
        body.insert("value".into(), self.value.clone().into_owned());
        body.insert("reason".into(), Json::from(self.reason));
        if let Some(v) = self.variation {
            body.insert("variant".into(), Json::from(v.to_string()));
        }
        body.insert("metadata".into(), json!({ "flagVersion": self.flag_version }));
        Json::Object(body)
    }
}

/// One flag's evaluation, or its failure's status and body.
fn evaluate<'s>(
    snap: &'s Snapshot,
    key: &'s str,
    ctx: &Context<'_>,
    viewer: Viewer,
) -> Result<Answer<'s>, (StatusCode, Json)> {
    let Some(flag) = snap.info(key).filter(|f| viewer.sees(f)) else {
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
        reason => Ok(Answer {
            key,
            value: typed(flag_type, d.value),
            reason: reason.openfeature_name(),
            variation: d.variation,
            flag_version: d.flag_version,
        }),
    }
}

/// A value as its flag's type says: a number flag's whole numbers as
/// floats (`1.0`), as OpenFeature's typed providers check them.
fn typed(flag_type: FlagType, v: Cow<'_, Json>) -> Cow<'_, Json> {
    match (flag_type, v.as_ref()) {
        (FlagType::Float, Json::Number(n)) if !n.is_f64() => match n.as_f64() {
            Some(f) => Cow::Owned(Json::from(f)),
            None => v,
        },
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

    /// The bulk answer as JSON, and its tag.
    fn bulk_json(s: &Snapshot, ctx: &Context<'_>, advertised: &str, viewer: Viewer) -> (Json, String) {
        let mut served = 0;
        let (body, tag) = bulk(s, ctx, advertised, viewer, |_, _| served += 1);
        let body: Json = serde_json::from_slice(&body).expect("the bulk body is JSON");
        assert_eq!(body["eventStreams"][0]["endpoint"]["requestUri"], advertised, "{body}");
        let evaluated =
            body["flags"].as_array().unwrap().iter().filter(|f| f.get("errorCode").is_none()).count();
        assert_eq!(served, evaluated, "usage hears of every evaluated flag");
        (body, tag)
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
        let (body, tag) = bulk_json(&s, &Context::new("u1"), "/events?a", Viewer::Server);
        assert_eq!(body["flags"].as_array().map(Vec::len), Some(3));
        assert_eq!(body["flags"][0]["key"], "dark", "sorted by key");
        // Another context with the same results: the same tag.
        assert_eq!(bulk_json(&s, &Context::new("u2"), "/events?a", Viewer::Server).1, tag);
        // A result that differs: another tag; so does another stream URI.
        assert_ne!(
            bulk_json(&s, &Context::new("u1").with("plan", "pro"), "/events?a", Viewer::Server).1,
            tag
        );
        assert_ne!(bulk_json(&s, &Context::new("u1"), "/events?b", Viewer::Server).1, tag);
        // Another flag's new version with the same results: the same tag.
        let mut set: FlagSet = serde_yaml_ng::from_str(FLAGS).unwrap();
        set.flags[0].version += 1;
        let bumped = Snapshot::compile(&set, &Limits::default()).unwrap();
        assert_eq!(bulk_json(&bumped, &Context::new("u1"), "/events?a", Viewer::Server).1, tag);
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
        let (body, tag) = bulk_json(&s, &pro, "/events?a", Viewer::Client);
        let keys: Vec<&str> =
            body["flags"].as_array().unwrap().iter().map(|f| f["key"].as_str().unwrap()).collect();
        assert_eq!(keys, ["gate"]);
        // A change to a hidden flag leaves the client's tag alone.
        set.flags[2].on = true;
        let changed = Snapshot::compile(&set, &Limits::default()).unwrap();
        assert_eq!(bulk_json(&changed, &pro, "/events?a", Viewer::Client).1, tag);
        assert_ne!(
            bulk_json(&changed, &pro, "/events?a", Viewer::Server).1,
            bulk_json(&s, &pro, "/events?a", Viewer::Server).1
        );
    }
}
