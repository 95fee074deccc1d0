//! Traces reach an OTLP collector: a receiver on loopback takes
//! `POST /v1/traces` protobuf bodies as a collector would, the API (served
//! here with the binaries' own tracing set-up) and a real worker process
//! export to it, and a scripted task leaves one trace: the submit's
//! `request` span, the worker's `task` span under it (the trace context
//! travels with the task through Redis) and its `step` spans, each named
//! for its service.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::routing::post;
use axum::Router;
use flotilla_config::Config;
use flotilla_telemetry as telemetry;
use flotilla_telemetry::LogOutput;
use flotilla_tests::fleet::test_env;
use flotilla_tests::tasks::{queue, submit_many, wait_all_ended, wait_spec};
use flotilla_tests::{api_key, spawn_api, unique_prefix, ApiClient, RedisServer, WorkerProcess};
use flotilla_types::ids::TaskId;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

/// One span as exported, with the `service.name` of its resource, the
/// resource's attributes and the `authorization` header it came with.
#[derive(Debug, Clone)]
struct Exported {
    service: String,
    resource: Vec<KeyValue>,
    authorization: Option<String>,
    span: Span,
}

impl Exported {
    fn attr(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }
}

/// A collector's traces endpoint, keeping every span it is sent.
#[derive(Clone, Default)]
struct Receiver {
    spans: Arc<Mutex<Vec<Exported>>>,
}

impl Receiver {
    /// Serves on a free loopback port, taking traces at `/v1/traces`; returns the OTLP base URL.
    async fn start(&self) -> String {
        self.start_at("/v1/traces").await
    }

    /// Serves on a free loopback port, taking traces at `path` only; returns the base URL.
    async fn start_at(&self, path: &str) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let app = Router::new().route(path, post(take_traces)).with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.ok() });
        url
    }

    fn spans(&self) -> Vec<Exported> {
        self.spans.lock().expect("receiver lock").clone()
    }
}

async fn take_traces(
    State(receiver): State<Receiver>,
    headers: header::HeaderMap,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1]) {
    let authorization = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let protobuf = [(header::CONTENT_TYPE, "application/x-protobuf")];
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (StatusCode::BAD_REQUEST, protobuf);
    };
    let mut kept = receiver.spans.lock().expect("receiver lock");
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.map(|r| r.attributes).unwrap_or_default();
        let service = attribute(&resource, "service.name").unwrap_or_default();
        for span in resource_spans.scope_spans.into_iter().flat_map(|scope| scope.spans) {
            let (service, resource, authorization) = (service.clone(), resource.clone(), authorization.clone());
            kept.push(Exported { service, resource, authorization, span });
        }
    }
    (StatusCode::OK, protobuf)
}

/// An attribute's value as text, whatever its type.
fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?.value.as_ref()?;
    Some(match value {
        AnyValue::StringValue(s) => s.clone(),
        AnyValue::IntValue(i) => i.to_string(),
        AnyValue::BoolValue(b) => b.to_string(),
        AnyValue::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_and_tasks_are_traced_to_an_otlp_collector() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let redis = RedisServer::start();
    let env = test_env(&redis, &unique_prefix(), &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]);
    let config = Config::from_env(env.clone()).expect("config");
    let api_telemetry = telemetry::init("flotilla-api", &config.telemetry, LogOutput::Stderr).expect("tracing");
    assert!(api_telemetry.exporting());
    let api = spawn_api(config.clone()).await;
    let mut worker = WorkerProcess::spawn(&env, "traced-worker");

    let spec = json!({"prompt": "wait twice", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 10}, {"type": "wait", "ms": 10}]});
    let client = ApiClient::new(&api, api_key());
    let (status, accepted) = client.post("/v1/tasks", &spec).await;
    assert_eq!(status, 202, "{accepted}");
    let id = TaskId::parse(accepted["id"].as_str().expect("task id")).expect("valid id");
    wait_all_ended(&queue(&config).await, std::slice::from_ref(&id), Duration::from_secs(20)).await;
    let (status, _) = client.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200);

    // Both flush what they batched as they stop.
    worker.signal("TERM");
    assert!(worker.wait_exit(20), "the worker stops on SIGTERM");
    drop(api);
    tokio::task::spawn_blocking(move || api_telemetry.shutdown()).await.expect("flushed");

    let spans = receiver.spans();
    let submit = spans
        .iter()
        .find(|s| {
            s.span.name == "request"
                && s.attr("method").as_deref() == Some("POST")
                && s.attr("route").as_deref() == Some("/v1/tasks")
        })
        .unwrap_or_else(|| panic!("a request span for the submit: {spans:#?}"));
    assert_eq!(submit.service, "flotilla-api");
    assert_eq!(submit.attr("method").as_deref(), Some("POST"));
    assert_eq!(submit.attr("task_id").as_deref(), Some(id.as_str()), "the request span names the task it made");
    assert_eq!(submit.attr("tenant").as_deref(), Some("acme"));

    let read = spans
        .iter()
        .find(|s| s.span.name == "request" && s.attr("method").as_deref() == Some("GET"))
        .unwrap_or_else(|| panic!("a request span for the read: {spans:#?}"));
    assert_eq!(read.attr("route").as_deref(), Some("/v1/tasks/{id}"), "the span names the matched route, not the raw path");
    assert!(read.attr("path").is_none(), "no raw path: {read:#?}");

    let task = spans
        .iter()
        .find(|s| s.span.name == "task" && s.attr("task_id").as_deref() == Some(id.as_str()))
        .unwrap_or_else(|| panic!("a task span: {spans:#?}"));
    assert_eq!(task.service, "flotilla-worker");
    assert_eq!(task.attr("attempt").as_deref(), Some("1"));
    assert_eq!(
        task.span.trace_id, submit.span.trace_id,
        "the worker's task continues the trace of the request that submitted it"
    );
    assert_eq!(task.span.parent_span_id, submit.span.span_id, "the task span is a child of the submit request");
    let steps: Vec<&Exported> = spans.iter().filter(|s| s.span.name == "step" && s.span.trace_id == task.span.trace_id).collect();
    assert_eq!(steps.len(), 2, "both steps are in the task's trace: {spans:#?}");
    for step in &steps {
        assert_eq!(step.span.parent_span_id, task.span.span_id, "a step is a child of its task");
        assert_eq!(step.attr("action").as_deref(), Some("wait"));
    }
    let numbers: Vec<Option<String>> = steps.iter().map(|s| s.attr("step")).collect();
    assert!(numbers.contains(&Some("1".into())) && numbers.contains(&Some("2".into())), "{numbers:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_per_signal_variables_choose_the_endpoint_headers_service_and_resource() {
    let receiver = Receiver::default();
    let base = receiver.start_at("/ingest/traces").await;
    let redis = RedisServer::start();
    let telemetry_vars = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &format!("{base}/ingest/traces")),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=wrong"),
        ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t0ken"),
        ("OTEL_SERVICE_NAME", "fleet-eu-worker"),
        ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=ci,team=a%2Cb"),
    ];
    let env = test_env(&redis, &unique_prefix(), &telemetry_vars);
    let config = Config::from_env(env.clone()).expect("config");
    let mut worker = WorkerProcess::spawn(&env, "per-signal-worker");
    let queue = queue(&config).await;
    let ids = submit_many(&queue, &wait_spec(10), 1).await;
    wait_all_ended(&queue, &ids, Duration::from_secs(20)).await;
    let id = &ids[0];
    worker.signal("TERM");
    assert!(worker.wait_exit(20), "the worker stops on SIGTERM");

    let spans = receiver.spans();
    let task = spans
        .iter()
        .find(|s| s.span.name == "task" && s.attr("task_id").as_deref() == Some(id.as_str()))
        .unwrap_or_else(|| panic!("the task span reached the traces endpoint: {spans:#?}"));
    assert_eq!(task.service, "fleet-eu-worker", "OTEL_SERVICE_NAME names the service");
    assert_eq!(task.authorization.as_deref(), Some("Bearer t0ken"), "the traces headers win over the general ones");
    assert_eq!(attribute(&task.resource, "deployment.environment").as_deref(), Some("ci"));
    assert_eq!(attribute(&task.resource, "team").as_deref(), Some("a,b"), "values are percent-decoded");
}
