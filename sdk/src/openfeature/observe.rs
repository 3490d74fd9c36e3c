//! Observing evaluations through the provider's own OpenFeature hook, with
//! the OpenTelemetry semantic-convention attribute names for feature-flag
//! evaluation. Opt-in ([`super::FlagstreamProvider::on_evaluation`]):
//! without it the provider has no hook and builds no flag metadata.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use open_feature::{
    EvaluationContext, EvaluationDetails, EvaluationError, EvaluationErrorCode, EvaluationReason,
    FlagMetadataValue, Value,
};
use open_feature::{Hook, HookContext, HookHints};

/// `feature_flag.key`: the flag's key.
pub const KEY: &str = "feature_flag.key";
/// `feature_flag.provider.name`: always `flagstream`.
pub const PROVIDER: &str = "feature_flag.provider.name";
/// `feature_flag.result.variant`: the variation index served, as text.
pub const VARIANT: &str = "feature_flag.result.variant";
/// `feature_flag.result.reason`: the OpenFeature reason, lower case
/// (`targeting_match`, `split`, `default`, `disabled`, `stale`, `error`).
pub const REASON: &str = "feature_flag.result.reason";
/// `feature_flag.version`: `EPOCH:REVISION` of the data evaluated (also in
/// the flag metadata, for any other hook).
pub const VERSION: &str = "feature_flag.version";
/// `error.type`: the OpenFeature error code, lower case.
pub const ERROR_TYPE: &str = "error.type";

/// What is called with each evaluation's attributes.
pub(super) type Callback = Arc<dyn Fn(&[(&'static str, String)]) + Send + Sync>;

/// The hook: one call of the callback per evaluation, after it succeeded
/// or failed. A panicking callback does not change the evaluation (the
/// first panic is logged).
pub(super) struct Observe {
    pub(super) callback: Callback,
    pub(super) panicked: AtomicBool,
    /// For an error's version: the error carries no metadata, so the data
    /// the client holds when the hook runs (right after the evaluation).
    pub(super) client: crate::Client,
}

impl Observe {
    fn call(&self, attributes: &[(&'static str, String)]) {
        let called = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.callback)(attributes)));
        if called.is_err() && !self.panicked.swap(true, Ordering::Relaxed) {
            tracing::warn!("the OpenFeature evaluation callback panicked; evaluations go on (logged once)");
        }
    }
}

/// An OpenFeature reason as the semantic conventions write it.
fn reason_name(r: &EvaluationReason) -> String {
    match r {
        EvaluationReason::Static => "static".into(),
        EvaluationReason::Default => "default".into(),
        EvaluationReason::TargetingMatch => "targeting_match".into(),
        EvaluationReason::Split => "split".into(),
        EvaluationReason::Cached => "cached".into(),
        EvaluationReason::Disabled => "disabled".into(),
        EvaluationReason::Unknown => "unknown".into(),
        EvaluationReason::Error => "error".into(),
        EvaluationReason::Other(other) => other.to_ascii_lowercase(),
    }
}

/// An OpenFeature error code as the semantic conventions write it.
fn error_name(code: &EvaluationErrorCode) -> String {
    match code {
        EvaluationErrorCode::ProviderNotReady => "provider_not_ready".into(),
        EvaluationErrorCode::FlagNotFound => "flag_not_found".into(),
        EvaluationErrorCode::ParseError => "parse_error".into(),
        EvaluationErrorCode::TypeMismatch => "type_mismatch".into(),
        EvaluationErrorCode::TargetingKeyMissing => "targeting_key_missing".into(),
        EvaluationErrorCode::InvalidContext => "invalid_context".into(),
        EvaluationErrorCode::General(_) => "general".into(),
    }
}

#[async_trait::async_trait]
impl Hook for Observe {
    async fn before<'a>(
        &self,
        _context: &HookContext<'a>,
        _hints: Option<&'a HookHints>,
    ) -> Result<Option<EvaluationContext>, EvaluationError> {
        Ok(None)
    }

    async fn after<'a>(
        &self,
        context: &HookContext<'a>,
        details: &EvaluationDetails<Value>,
        _hints: Option<&'a HookHints>,
    ) -> Result<(), EvaluationError> {
        let mut attributes = Vec::with_capacity(5);
        attributes.push((KEY, context.flag_key.to_owned()));
        attributes.push((PROVIDER, "flagstream".to_owned()));
        if let Some(v) = &details.variant {
            attributes.push((VARIANT, v.clone()));
        }
        if let Some(r) = &details.reason {
            attributes.push((REASON, reason_name(r)));
        }
        if let Some(FlagMetadataValue::String(v)) = details.flag_metadata.values.get(VERSION) {
            attributes.push((VERSION, v.clone()));
        }
        self.call(&attributes);
        Ok(())
    }

    async fn error<'a>(
        &self,
        context: &HookContext<'a>,
        error: &EvaluationError,
        _hints: Option<&'a HookHints>,
    ) {
        let mut attributes = vec![
            (KEY, context.flag_key.to_owned()),
            (PROVIDER, "flagstream".to_owned()),
            (REASON, "error".to_owned()),
            (ERROR_TYPE, error_name(&error.code)),
        ];
        // An evaluation that read data (a missing flag, a wrong type) has a
        // version; one refused before (no data, a bad context) has none.
        let evaluated = !matches!(
            error.code,
            EvaluationErrorCode::ProviderNotReady | EvaluationErrorCode::InvalidContext
        );
        if evaluated && self.client.status().has_data() {
            let snap = self.client.snapshot();
            attributes.push((VERSION, format!("{}:{}", snap.epoch(), snap.revision())));
        }
        self.call(&attributes);
    }

    async fn finally<'a>(
        &self,
        _context: &HookContext<'a>,
        _details: &EvaluationDetails<Value>,
        _hints: Option<&'a HookHints>,
    ) {
    }
}
