//! With `otlp-endpoint` set, the relay sends its spans to an OpenTelemetry
//! collector over OTLP/gRPC (here a minimal receiver in the test): one
//! write can be followed from the Admin call (`admin_write`, with its
//! principal and the revision it committed) to the stream that delivered
//! it (`subscribe`, whose `delivered` event names that revision, and whose
//! `end` says why it ended). Spans still buffered at SIGTERM are sent
//! before the process exits. A bad endpoint is a configuration error.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flagstream::Context;
use flagstream_tests::STEP;
use flagstream_tests::relay::{Relay, bool_flag, put};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};

/// One received span: its service, name, attributes and events (each a
/// name and its attributes).
#[derive(Debug, Clone)]
struct Span {
    service: String,
    name: String,
    attributes: HashMap<String, String>,
    events: Vec<(String, HashMap<String, String>)>,
}

fn text(v: &Option<AnyValue>) -> String {
    match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        Some(any_value::Value::IntValue(i)) => i.to_string(),
        Some(any_value::Value::BoolValue(b)) => b.to_string(),
        Some(any_value::Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn map(kvs: &[KeyValue]) -> HashMap<String, String> {
    kvs.iter().map(|kv| (kv.key.clone(), text(&kv.value))).collect()
}

/// The collector: keeps every span it is sent.
#[derive(Debug, Clone, Default)]
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
}

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.into_inner().resource_spans {
            let resource = rs.resource.map(|r| map(&r.attributes)).unwrap_or_default(); // no resource: no service name
            let service = resource.get("service.name").cloned().unwrap_or_default(); // checked below
            for s in rs.scope_spans.into_iter().flat_map(|ss| ss.spans) {
                spans.push(Span {
                    service: service.clone(),
                    name: s.name.clone(),
                    attributes: map(&s.attributes),
                    events: s.events.iter().map(|e| (e.name.clone(), map(&e.attributes))).collect(),
                });
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

#[tokio::test]
async fn one_write_is_followed_from_the_call_to_the_stream_in_an_otlp_collector() {
    let collector = Collector::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tonic::transport::Server::builder()
        .add_service(TraceServiceServer::new(collector.clone()))
        .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener));
    let serving = tokio::spawn(serving);

    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://{addr}");
    let mut relay = Relay::start(dir.path(), &["--otlp-endpoint", &endpoint]).await;
    let sdk = relay.ready_sdk().await;
    let mut changes = sdk.changes();
    let revision = put(&mut relay.admin().await, "demo", bool_flag("traced", true)).await.unwrap();
    flagstream_tests::fault::wait_change(&mut changes, "traced", STEP).await;
    assert!(sdk.bool("traced", &Context::new("u"), false));
    assert!(sdk.close(STEP).await, "the client said goodbye");
    relay.sigterm();
    assert!(relay.wait(STEP).await.success(), "{}", relay.log());
    serving.abort();

    let spans = collector.spans.lock().unwrap().clone();
    assert!(spans.iter().all(|s| s.service == "flagstream-relay"), "{spans:#?}");
    let write = spans
        .iter()
        .find(|s| s.name == "admin_write" && s.attributes.get("revision") == Some(&revision.to_string()))
        .unwrap_or_else(|| panic!("no admin_write span for revision {revision}: {spans:#?}"));
    assert_eq!(write.attributes["env"], "demo", "{write:?}");
    assert_eq!(write.attributes["principal"], "bootstrap", "{write:?}");
    assert!(write.events.iter().any(|(name, _)| name == "write committed"), "{write:?}");
    let stream = spans
        .iter()
        .find(|s| {
            s.name == "subscribe"
                && s.events
                    .iter()
                    .any(|(name, a)| name == "delivered" && a.get("revision") == Some(&revision.to_string()))
        })
        .unwrap_or_else(|| panic!("no subscribe span delivered revision {revision}: {spans:#?}"));
    assert_eq!(stream.attributes["env"], "demo", "{stream:?}");
    assert!(stream.attributes["sdk"].starts_with("flagstream-rust/"), "{stream:?}");
    assert_eq!(stream.attributes["relay"], "false", "{stream:?}");
    assert_eq!(stream.attributes["end"], "client_gone", "the client closed it (its Goodbye): {stream:?}");
}

#[tokio::test]
async fn an_otlp_endpoint_that_is_no_url_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let Err((status, log)) = Relay::try_start(dir.path(), &["--otlp-endpoint", "127.0.0.1:4317"]).await
    else {
        panic!("a relay started with a bad otlp-endpoint");
    };
    assert_eq!(status.and_then(|s| s.code()), Some(64), "{log}");
    assert!(log.contains("otlp-endpoint: \"127.0.0.1:4317\" is not an http:// or https:// URL"), "{log}");
}
