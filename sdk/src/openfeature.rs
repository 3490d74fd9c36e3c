//! OpenFeature provider (cargo feature `openfeature`): exposes a [`Client`]
//! through the `open-feature` crate's `FeatureProvider`. Every type is
//! resolved; reasons and error codes map one to one (docs/EVALUATION.md):
//! OFF and PREREQUISITE_FAILED → DISABLED, TARGET_MATCH and RULE_MATCH →
//! TARGETING_MATCH, FALLTHROUGH → DEFAULT (SPLIT when a rollout chose),
//! stale data → STALE; FLAG_NOT_FOUND, WRONG_TYPE → TYPE_MISMATCH,
//! MALFORMED_FLAG → PARSE_ERROR, NOT_READY → PROVIDER_NOT_READY. Status
//! maps Initializing → NOT_READY, Ready → READY, Stale → STALE, Failed →
//! ERROR.

use std::borrow::Cow;

use open_feature::provider::{FeatureProvider, ProviderMetadata, ProviderStatus, ResolutionDetails};
use open_feature::{
    EvaluationContext, EvaluationContextFieldValue, EvaluationError, EvaluationErrorCode, EvaluationReason,
    EvaluationResult, StructValue, Value,
};
use serde_json::Value as Json;

use crate::{Client, Context, Detail, ErrorKind, FromValue, Reason, Status};

/// A flagstream [`Client`] as an OpenFeature provider.
#[derive(Debug, Clone)]
pub struct FlagstreamProvider {
    client: Client,
    metadata: ProviderMetadata,
}

impl FlagstreamProvider {
    /// Wraps a client.
    pub fn new(client: Client) -> FlagstreamProvider {
        FlagstreamProvider { client, metadata: ProviderMetadata::new("flagstream") }
    }
}

/// The flagstream context for an OpenFeature context: the targeting key is
/// the key; a `kind` field sets the kind; bool, number and string fields
/// become attributes; date-times become Unix milliseconds; structures are
/// skipped (flagstream attributes are scalars or lists).
pub fn context(ctx: &EvaluationContext) -> Context<'_> {
    let mut out = Context::new(ctx.targeting_key.as_deref().unwrap_or(""));
    for (name, v) in &ctx.custom_fields {
        match v {
            EvaluationContextFieldValue::String(s) if name == "kind" => out = out.kind(s.as_str()),
            EvaluationContextFieldValue::Bool(b) => out.set(name.as_str(), *b),
            EvaluationContextFieldValue::Int(i) => out.set(name.as_str(), *i),
            EvaluationContextFieldValue::Float(f) => out.set(name.as_str(), *f),
            EvaluationContextFieldValue::String(s) => out.set(name.as_str(), s.as_str()),
            EvaluationContextFieldValue::DateTime(t) => {
                out.set(name.as_str(), (t.unix_timestamp_nanos() / 1_000_000) as f64);
            }
            EvaluationContextFieldValue::Struct(_) => {}
        }
    }
    out
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
    match r {
        Reason::Off | Reason::PrerequisiteFailed { .. } => EvaluationReason::Disabled,
        Reason::TargetMatch | Reason::RuleMatch { .. } => EvaluationReason::TargetingMatch,
        Reason::Fallthrough { rollout: true, .. } => EvaluationReason::Split,
        Reason::Fallthrough { rollout: false, .. } => EvaluationReason::Default,
        Reason::Error(_) => EvaluationReason::Error,
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
        let ctx = context(ctx);
        self.client.with_detail(key, &ctx, placeholder, |d| resolve(d, convert))
    }
}

#[async_trait::async_trait]
impl FeatureProvider for FlagstreamProvider {
    fn metadata(&self) -> &ProviderMetadata {
        &self.metadata
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
        let ctx = context(ctx);
        if !self.client.status().has_data() {
            return Err(EvaluationError::builder().code(EvaluationErrorCode::ProviderNotReady).build());
        }
        let snap = self.client.snapshot();
        let mut d = snap.detail(key, &ctx, "");
        d.stale = self.client.status().is_stale();
        resolve(d, |s: &str| Ok(s.to_owned()))
    }

    async fn resolve_struct_value(
        &self,
        key: &str,
        ctx: &EvaluationContext,
    ) -> EvaluationResult<ResolutionDetails<StructValue>> {
        let ctx = context(ctx);
        if !self.client.status().has_data() {
            return Err(EvaluationError::builder().code(EvaluationErrorCode::ProviderNotReady).build());
        }
        let snap = self.client.snapshot();
        let mut d = snap.detail(key, &ctx, Cow::Owned(Json::Null));
        d.stale = self.client.status().is_stale();
        resolve(d, |j: Cow<'_, Json>| match Value::try_from(j.as_ref())? {
            Value::Struct(s) => Ok(s),
            _ => Err(EvaluationError::builder()
                .code(EvaluationErrorCode::TypeMismatch)
                .message("the flag's value is not a JSON object")
                .build()),
        })
    }
}
