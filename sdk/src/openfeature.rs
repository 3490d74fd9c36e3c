//! OpenFeature provider (cargo feature `openfeature`): exposes a [`Client`]
//! through the `open-feature` crate's `FeatureProvider`. Every type is
//! resolved; reasons and error codes map one to one (docs/EVALUATION.md):
//! OFF and PREREQUISITE_FAILED → DISABLED, TARGET_MATCH and RULE_MATCH →
//! TARGETING_MATCH, FALLTHROUGH → DEFAULT (SPLIT when a rollout chose),
//! stale data → STALE; FLAG_NOT_FOUND, WRONG_TYPE → TYPE_MISMATCH,
//! MALFORMED_FLAG → PARSE_ERROR, NOT_READY → PROVIDER_NOT_READY. Status
//! maps Initializing → NOT_READY, Ready → READY, Stale → STALE, Failed →
//! ERROR.
//!
//! [`FlagstreamProvider::on_evaluation`] observes every evaluation through
//! the provider's own hook, with the OpenTelemetry attribute names
//! (`observe.rs`); without it, nothing is added to an evaluation.

mod observe;

use std::borrow::Cow;
use std::sync::Arc;

pub use observe::{ERROR_TYPE, KEY, PROVIDER, REASON, VARIANT, VERSION};
use open_feature::HookWrapper;
use open_feature::provider::{FeatureProvider, ProviderMetadata, ProviderStatus, ResolutionDetails};
use open_feature::{
    EvaluationContext, EvaluationContextFieldValue, EvaluationError, EvaluationErrorCode, EvaluationReason,
    EvaluationResult, FlagMetadata, StructValue, Value,
};
use serde_json::Value as Json;

use crate::{Client, Context, Detail, ErrorKind, FromValue, Reason, Status};

/// A flagstream [`Client`] as an OpenFeature provider.
#[derive(Clone)]
pub struct FlagstreamProvider {
    client: Client,
    metadata: ProviderMetadata,
    /// The provider's own hooks: the evaluation observer, when set.
    hooks: Vec<HookWrapper>,
    /// Whether evaluations are observed (then each carries its version in
    /// the flag metadata).
    observed: bool,
}

impl std::fmt::Debug for FlagstreamProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FlagstreamProvider")
            .field("client", &self.client)
            .field("observed", &self.observed)
            .finish_non_exhaustive()
    }
}

impl FlagstreamProvider {
    /// Wraps a client.
    pub fn new(client: Client) -> FlagstreamProvider {
        FlagstreamProvider {
            client,
            metadata: ProviderMetadata::new("flagstream"),
            hooks: Vec::new(),
            observed: false,
        }
    }

    /// Observes every evaluation through this provider's OpenFeature hook:
    /// `callback` gets, once per evaluation (after it succeeded or failed),
    /// its attributes under the OpenTelemetry semantic-convention names —
    /// [`KEY`], [`PROVIDER`], [`VARIANT`] (when a variation was served),
    /// [`REASON`] (`stale` when the data is older than the stall timeout),
    /// [`VERSION`] (`EPOCH:REVISION` of the data evaluated; on an error,
    /// of the data held right after it, absent when none was read) and,
    /// on an error, [`ERROR_TYPE`] — ready to become a span event or a log
    /// record. Each result's flag metadata then also carries [`VERSION`]
    /// for any other hook. Without this call the provider has no hook and
    /// adds nothing to an evaluation. The targeting key is not reported
    /// (personal data).
    pub fn on_evaluation(
        mut self,
        callback: impl Fn(&[(&'static str, String)]) + Send + Sync + 'static,
    ) -> Self {
        self.hooks = vec![HookWrapper::new(observe::Observe {
            callback: Arc::new(callback),
            panicked: std::sync::atomic::AtomicBool::new(false),
            client: self.client.clone(),
        })];
        self.observed = true;
        self
    }

    /// With observation on: the version of the data `revision` came from,
    /// in the flag metadata (the epoch read right after the evaluation).
    fn versioned<U>(&self, details: ResolutionDetails<U>, revision: u64) -> ResolutionDetails<U> {
        if !self.observed {
            return details;
        }
        let version = format!("{}:{revision}", self.client.snapshot().epoch());
        ResolutionDetails {
            flag_metadata: Some(FlagMetadata::default().with_value(VERSION, version)),
            ..details
        }
    }
}

/// The flagstream context for an OpenFeature context (docs/EVALUATION.md,
/// "OpenFeature"):
///
/// - the targeting key is the key; a string field `kind` sets the kind
///   (default `user`); bool, number and string fields become attributes;
///   date-times become Unix milliseconds;
/// - a structure field holding a `serde_json::Value` or an OpenFeature
///   [`StructValue`] becomes a JSON attribute (objects and arrays that
///   attribute references address, `/address/city`); structures of any
///   other Rust type are skipped;
/// - `kind: "multi"` makes a multi-kind context: every structure field is
///   one kind, named by the field, its key from its `targetingKey` (or
///   `key`) member and its other members its attributes; the top level's
///   targeting key and scalar fields are then ignored. A multi-kind
///   context with no structure field evaluates as the single context of
///   the targeting key, with no attributes;
/// - a `kind` (or, in a multi-kind context, a field name) that is not a
///   valid kind name (EVALUATION.md, "Context kinds") is ignored.
pub fn context(ctx: &EvaluationContext) -> Context<'_> {
    let key = ctx.targeting_key.as_deref().unwrap_or("");
    let multi =
        matches!(ctx.custom_fields.get("kind"), Some(EvaluationContextFieldValue::String(k)) if k == "multi");
    if multi {
        // Sorted by kind name, so the result does not depend on the map's
        // order; a field that is not a valid kind name is skipped (logged).
        let mut fields: Vec<_> = ctx.custom_fields.iter().collect();
        fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
        let kinds = fields.into_iter().filter_map(|(name, v)| match v {
            EvaluationContextFieldValue::Struct(any) if valid_kind(name) => {
                struct_json(any).map(|j| kind_context(name, j))
            }
            _ => None,
        });
        let kinds: Vec<Context<'_>> = kinds.collect();
        // Field names are unique, so kinds are too; none at all: `None`.
        return Context::multi(kinds).unwrap_or_else(|| Context::new(key));
    }
    let mut out = Context::new(key);
    for (name, v) in &ctx.custom_fields {
        match v {
            EvaluationContextFieldValue::String(s) if name == "kind" => {
                if valid_kind(s) {
                    out = out.kind(s.as_str());
                }
            }
            EvaluationContextFieldValue::Bool(b) => out.set(name.as_str(), *b),
            EvaluationContextFieldValue::Int(i) => out.set(name.as_str(), *i),
            EvaluationContextFieldValue::Float(f) => out.set(name.as_str(), *f),
            EvaluationContextFieldValue::String(s) => out.set(name.as_str(), s.as_str()),
            EvaluationContextFieldValue::DateTime(t) => {
                out.set(name.as_str(), (t.unix_timestamp_nanos() / 1_000_000) as f64);
            }
            EvaluationContextFieldValue::Struct(any) => {
                if let Some(v) = struct_json(any).as_ref().and_then(crate::AttrValue::from_json) {
                    out.set(name.as_str(), v);
                }
            }
        }
    }
    out
}

/// [`context`], refused with `INVALID_CONTEXT` when it holds more kinds
/// than [`flagstream_core::MAX_CONTEXT_KINDS`] or a kind with more
/// attributes than [`flagstream_core::MAX_CONTEXT_ATTRIBUTES`]: the caps
/// every context read from outside the program has (EVALUATION.md,
/// "Context limits"). Counted before anything is converted.
pub fn checked_context(ctx: &EvaluationContext) -> EvaluationResult<Context<'_>> {
    let invalid =
        |m: String| EvaluationError::builder().code(EvaluationErrorCode::InvalidContext).message(m).build();
    let multi =
        matches!(ctx.custom_fields.get("kind"), Some(EvaluationContextFieldValue::String(k)) if k == "multi");
    if multi {
        let kinds: Vec<_> = ctx
            .custom_fields
            .iter()
            .filter_map(|(name, v)| match v {
                EvaluationContextFieldValue::Struct(any) if valid_kind(name) => Some((name, any)),
                _ => None,
            })
            .collect();
        if let Some(problem) = flagstream_core::context_kinds_problem(kinds.len()) {
            return Err(invalid(format!("context: {problem}")));
        }
        for (name, any) in kinds {
            if let Some(problem) = flagstream_core::context_attributes_problem(struct_attributes(any)) {
                return Err(invalid(format!("context.{name}: {problem}")));
            }
        }
    } else {
        // `kind` is a field that is not an attribute.
        let n = ctx.custom_fields.len() - usize::from(ctx.custom_fields.contains_key("kind"));
        if let Some(problem) = flagstream_core::context_attributes_problem(n) {
            return Err(invalid(format!("context: {problem}")));
        }
    }
    Ok(context(ctx))
}

/// Attributes a structure field makes as one kind: its members but
/// `targetingKey` and `key` (0 for types [`struct_json`] skips).
fn struct_attributes(any: &std::sync::Arc<dyn std::any::Any + Send + Sync>) -> usize {
    let not_key = |name: &String| name != "targetingKey" && name != "key";
    if let Some(Json::Object(m)) = any.downcast_ref::<Json>() {
        return m.keys().filter(|n| not_key(n)).count();
    }
    any.downcast_ref::<StructValue>().map_or(0, |s| s.fields.keys().filter(|n| not_key(n)).count())
}

/// Whether `kind` may name a context kind; an invalid one is logged and
/// left out (the context keeps the default kind).
fn valid_kind(kind: &str) -> bool {
    match crate::reference::kind_problem(kind) {
        None => true,
        Some(problem) => {
            tracing::debug!(kind, %problem, "OpenFeature context: not a context kind; ignored");
            false
        }
    }
}

/// A structure field as JSON, when it holds a type we know.
fn struct_json(any: &std::sync::Arc<dyn std::any::Any + Send + Sync>) -> Option<Json> {
    if let Some(j) = any.downcast_ref::<Json>() {
        return Some(j.clone());
    }
    any.downcast_ref::<StructValue>().map(|s| value_json(&Value::Struct(s.clone())))
}

/// One kind of a multi-kind OpenFeature context.
fn kind_context<'a>(kind: &str, j: Json) -> Context<'a> {
    let Json::Object(mut fields) = j else { return Context::new("").kind(kind.to_owned()) };
    let key = ["targetingKey", "key"]
        .iter()
        .find_map(|k| match fields.remove(*k) {
            Some(Json::String(s)) => Some(s),
            _ => None,
        })
        // No key member: the empty key, a present string that buckets as
        // empty bytes (EVALUATION.md), as for a context built with "".
        .unwrap_or_default();
    let mut out = Context::new(key).kind(kind.to_owned());
    for (name, v) in fields {
        // A null member is a missing attribute, as everywhere else.
        if let Some(v) = crate::AttrValue::from_json(&v) {
            out.set(name, v);
        }
    }
    out
}

/// An OpenFeature value as JSON.
fn value_json(v: &Value) -> Json {
    match v {
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Float(f) => Json::from(*f),
        Value::String(s) => Json::String(s.clone()),
        Value::Array(items) => Json::Array(items.iter().map(value_json).collect()),
        Value::Struct(s) => Json::Object(s.fields.iter().map(|(k, v)| (k.clone(), value_json(v))).collect()),
    }
}

fn error_code(kind: ErrorKind) -> EvaluationErrorCode {
    match kind {
        ErrorKind::FlagNotFound => EvaluationErrorCode::FlagNotFound,
        ErrorKind::WrongType => EvaluationErrorCode::TypeMismatch,
        ErrorKind::MalformedFlag => EvaluationErrorCode::ParseError,
        ErrorKind::NotReady => EvaluationErrorCode::ProviderNotReady,
    }
}

/// The OpenFeature reason of a flagstream result.
pub fn reason(r: &Reason<'_>, stale: bool) -> EvaluationReason {
    if stale {
        return EvaluationReason::Other("STALE".into());
    }
    // The one mapping, the core's (OFREP serves the same names).
    match r.openfeature_name() {
        "DISABLED" => EvaluationReason::Disabled,
        "TARGETING_MATCH" => EvaluationReason::TargetingMatch,
        "SPLIT" => EvaluationReason::Split,
        "DEFAULT" => EvaluationReason::Default,
        _ => EvaluationReason::Error,
    }
}

fn resolve<'s, T, U>(
    d: Detail<'s, T>,
    convert: impl FnOnce(T) -> EvaluationResult<U>,
) -> EvaluationResult<ResolutionDetails<U>> {
    if let Reason::Error(kind) = d.reason {
        return Err(EvaluationError::builder().code(error_code(kind)).message(kind.name()).build());
    }
    Ok(ResolutionDetails {
        value: convert(d.value)?,
        variant: d.variation.map(|v| v.to_string()),
        reason: Some(reason(&d.reason, d.stale)),
        flag_metadata: None,
    })
}

impl FlagstreamProvider {
    fn typed<T, U>(
        &self,
        key: &str,
        ctx: &EvaluationContext,
        placeholder: T,
        convert: impl FnOnce(T) -> EvaluationResult<U>,
    ) -> EvaluationResult<ResolutionDetails<U>>
    where
        T: for<'s> FromValue<'s>,
    {
        let ctx = checked_context(ctx)?;
        let (details, revision) = self.client.with_detail(key, &ctx, placeholder, |d| {
            let revision = d.revision;
            resolve(d, convert).map(|r| (r, revision))
        })?;
        Ok(self.versioned(details, revision))
    }
}

#[async_trait::async_trait]
impl FeatureProvider for FlagstreamProvider {
    fn metadata(&self) -> &ProviderMetadata {
        &self.metadata
    }

    fn hooks(&self) -> &[HookWrapper] {
        &self.hooks
    }

    fn status(&self) -> ProviderStatus {
        match self.client.status() {
            Status::Initializing { .. } => ProviderStatus::NotReady,
            Status::Ready { .. } => ProviderStatus::Ready,
            Status::Stale { .. } => ProviderStatus::STALE,
            Status::Failed { .. } => ProviderStatus::Error,
        }
    }

    async fn resolve_bool_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<bool>> {
        self.typed(key, ctx, false, Ok)
    }

    async fn resolve_int_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<i64>> {
        self.typed(key, ctx, 0i64, Ok)
    }

    async fn resolve_float_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<f64>> {
        self.typed(key, ctx, 0f64, Ok)
    }

    async fn resolve_string_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<String>> {
        let ctx = checked_context(ctx)?;
        if !self.client.status().has_data() {
            return Err(EvaluationError::builder().code(EvaluationErrorCode::ProviderNotReady).build());
        }
        let snap = self.client.snapshot();
        let mut d = snap.detail(key, &ctx, "");
        d.stale = self.client.status().is_stale();
        let revision = d.revision;
        resolve(d, |s: &str| Ok(s.to_owned())).map(|r| self.versioned(r, revision))
    }

    async fn resolve_struct_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<StructValue>> {
        let ctx = checked_context(ctx)?;
        if !self.client.status().has_data() {
            return Err(EvaluationError::builder().code(EvaluationErrorCode::ProviderNotReady).build());
        }
        let snap = self.client.snapshot();
        let mut d = snap.detail(key, &ctx, Cow::Owned(Json::Null));
        d.stale = self.client.status().is_stale();
        let revision = d.revision;
        let details = resolve(d, |j: Cow<'_, Json>| match Value::try_from(j.as_ref())? {
            Value::Struct(s) => Ok(s),
            _ => Err(EvaluationError::builder()
                .code(EvaluationErrorCode::TypeMismatch)
                .message("the flag's value is not a JSON object")
                .build()),
        })?;
        Ok(self.versioned(details, revision))
    }
}
