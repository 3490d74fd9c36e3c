//! The relay's logs on stderr and, when `otlp-endpoint` is set, its spans
//! sent to an OpenTelemetry collector over OTLP/gRPC (off by default: no
//! span is then built for export, and nothing is sent anywhere).
//!
//! The spans are the ones docs/OPERATIONS.md "Following one write" names,
//! with stable field names: `admin_write` (env, principal, ops, revision),
//! `subscribe` (env, subscriber, sdk, relay, cursor), `replica_apply` (env,
//! kind, from, revision) and `feed_step` (env, from, to, lag_ms).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The service name spans carry (`service.name`).
const SERVICE: &str = "flagstream-relay";

/// How long one export may take before it is given up.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// What shutdown must flush: the span pipeline, when there is one.
#[derive(Debug)]
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Sends the spans still buffered and stops the exporter (a no-op
    /// without `otlp-endpoint`). Blocks: call it off the async workers.
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "sending the last spans to the OTLP collector failed");
        }
    }
}

/// Installs the tracing subscriber: `RUST_LOG` filters (default `info`),
/// text or JSON lines on stderr (colours only on a terminal), and with
/// `otlp` (`http://host:4317` or `https://…`) a batch exporter of the
/// spans. Must run on the relay's runtime (the exporter's channel is
/// made on it, and its exports run on it).
pub(crate) fn init(json: bool, otlp: Option<&str>) -> anyhow::Result<Telemetry> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let fmt = if json { fmt.json().boxed() } else { fmt.boxed() };
    let provider = otlp.map(exporter).transpose()?;
    // Only the relay's own spans: never the exporter's transport (h2, hyper,
    // tonic), which would export its own exports when they are logged.
    let spans = provider.as_ref().map(|p| {
        tracing_opentelemetry::layer().with_tracer(p.tracer(SERVICE)).with_filter(
            tracing_subscriber::filter::Targets::new().with_target("flagstream_relay", tracing::Level::TRACE),
        )
    });
    tracing_subscriber::registry().with(filter).with(fmt).with(spans).try_init()?;
    if let Some(endpoint) = otlp {
        tracing::info!(endpoint, "sending spans to the OTLP collector");
    }
    Ok(Telemetry { provider })
}

/// The span pipeline to `endpoint`: the OTLP/gRPC exporter (TLS for an
/// `https` endpoint, with the webpki roots) behind a batch processor.
fn exporter(endpoint: &str) -> anyhow::Result<SdkTracerProvider> {
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .with_timeout(EXPORT_TIMEOUT);
    if endpoint.starts_with("https://") {
        builder = builder.with_tls_config(tonic::transport::ClientTlsConfig::new().with_webpki_roots());
    }
    let otlp = builder.build().map_err(|e| anyhow::anyhow!("otlp-endpoint {endpoint}: {e}"))?;
    let exporter = OnRuntime {
        inner: Arc::new(otlp),
        runtime: tokio::runtime::Handle::current(),
        failures: Arc::new(AtomicU64::new(0)),
    };
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(SERVICE).build();
    Ok(SdkTracerProvider::builder().with_resource(resource).with_batch_exporter(exporter).build())
}

/// The OTLP exporter with every export run on the relay's runtime: the
/// batch processor exports from a thread of its own, where tonic's
/// channel finds no Tokio reactor. Failures are logged (the first, then
/// every 100th), never silently dropped.
#[derive(Debug)]
struct OnRuntime {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    runtime: tokio::runtime::Handle,
    failures: Arc<AtomicU64>,
}

impl SpanExporter for OnRuntime {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (inner, failures) = (self.inner.clone(), self.failures.clone());
        let spans = batch.len();
        let task = self.runtime.spawn(async move { inner.export(batch).await });
        async move {
            let result = match task.await {
                Ok(r) => r,
                Err(e) => Err(OTelSdkError::InternalFailure(format!("the export task failed: {e}"))),
            };
            if let Err(e) = &result {
                let n = failures.fetch_add(1, Ordering::Relaxed);
                if n % 100 == 0 {
                    tracing::warn!(error = %e, spans, failures = n + 1, "sending spans to the OTLP collector failed; they are dropped");
                }
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.set_resource(resource),
            // Only before the first export is it called, when this is the
            // one reference; a later call would find it shared.
            None => tracing::warn!("the OTLP exporter's resource could not be set; spans lack service.name"),
        }
    }
}
