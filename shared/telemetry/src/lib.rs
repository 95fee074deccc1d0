//! Tracing for both binaries, set up once in `main`: human-readable lines
//! filtered by `RUST_LOG` (default `info`), and, when a traces endpoint is
//! set ([`TelemetryConfig`]: `OTEL_EXPORTER_OTLP_ENDPOINT` or its per-signal
//! variable, with headers, service name and resource attributes), the same
//! spans exported as OpenTelemetry traces over OTLP/HTTP with protobuf bodies.
//! Every log line passes through [`flotilla_types::redact`] before it is written.
//!
//! Exported spans go through a batch processor on a thread of its own, so a
//! slow or absent collector never holds up a request or a task; the guard
//! [`init`] returns flushes what is left when it is shut down (or dropped)
//! at the end of `main`. Only the Flotilla crates' spans at `info` and above
//! are exported, whatever `RUST_LOG` says, so quiet logs still give full
//! traces and the HTTP client that sends them never traces itself.

mod redacting;

use std::collections::HashMap;
use std::io::IsTerminal;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use self::redacting::Redacting;

pub use flotilla_config::TelemetryConfig;

/// The W3C trace-context field a task carries from the API to its worker.
const TRACEPARENT: &str = "traceparent";

/// The W3C `traceparent` of the current span, when spans are exported; it
/// is stored with the tasks a request creates, so the worker's spans for
/// them join the request's trace.
pub fn current_traceparent() -> Option<String> {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let context = tracing::Span::current().context();
    let mut fields = std::collections::HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut fields);
    fields.remove(TRACEPARENT)
}

/// Makes `span` continue the trace `traceparent` names (as the API stored
/// it); a malformed value leaves `span` where it is.
pub fn continue_trace(span: &tracing::Span, traceparent: &str) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let fields = std::collections::HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&fields);
    if context.span().span_context().is_valid() && span.set_parent(context).is_err() {
        tracing::debug!("the task's span could not join the request's trace");
    }
}

/// The crates whose spans are exported.
const EXPORTED_CRATES: [&str; 7] = [
    "flotilla_api",
    "flotilla_worker",
    "flotilla_queue",
    "flotilla_blobstore",
    "flotilla_config",
    "flotilla_telemetry",
    "flotilla_types",
];

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogOutput {
    Stdout,
    Stderr,
}

/// Why tracing could not be set up; each names the setting at fault.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("RUST_LOG: {0}")]
    Filter(#[from] tracing_subscriber::filter::ParseError),
    #[error("OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT: cannot build the trace exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
    #[error("tracing is already set up in this process")]
    AlreadySet,
}

/// Keeps the trace pipeline alive; shut it down (or drop it) last in
/// `main` so spans still in the batch are sent.
#[must_use = "dropping the guard stops trace export"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Sends the spans still batched and stops exporting.
    pub fn shutdown(mut self) {
        self.flush_and_stop();
    }

    fn flush_and_stop(&mut self) {
        let Some(provider) = self.provider.take() else { return };
        if let Err(e) = provider.shutdown() {
            tracing::warn!(error = %e, "could not send the last spans to the trace collector");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush_and_stop();
    }
}

/// Installs the global subscriber for `service` (`flotilla-api`,
/// `flotilla-worker`, unless `OTEL_SERVICE_NAME` names it otherwise): log
/// lines to `output`, and spans to the configured traces endpoint, if any.
pub fn init(service: &'static str, config: &TelemetryConfig, output: LogOutput) -> Result<Telemetry, TelemetryError> {
    let provider = config.traces_endpoint.as_deref().map(|endpoint| tracer_provider(service, endpoint, config)).transpose()?;
    let otel = provider
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer(service)).with_filter(exported_targets()));
    tracing_subscriber::registry().with(log_layer(output)?).with(otel).try_init().map_err(|_| TelemetryError::AlreadySet)?;
    if provider.is_some() {
        tracing::info!(service, "exporting traces over OTLP/HTTP");
    }
    Ok(Telemetry { provider })
}

/// Human-readable lines filtered by `RUST_LOG`, coloured on a terminal,
/// with secrets masked ([`redacting`]).
fn log_layer<S>(output: LogOutput) -> Result<impl Layer<S>, TelemetryError>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let (writer, ansi) = match output {
        LogOutput::Stdout => (BoxMakeWriter::new(Redacting(std::io::stdout)), std::io::stdout().is_terminal()),
        LogOutput::Stderr => (BoxMakeWriter::new(Redacting(std::io::stderr)), std::io::stderr().is_terminal()),
    };
    Ok(tracing_subscriber::fmt::layer().with_writer(writer).with_ansi(ansi).with_filter(log_filter()?))
}

/// `RUST_LOG` if set, else `info`.
fn log_filter() -> Result<EnvFilter, tracing_subscriber::filter::ParseError> {
    match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.trim().is_empty() => EnvFilter::try_new(directives),
        _ => Ok(EnvFilter::new("info")),
    }
}

/// Flotilla's own spans at `info` and above; nothing of the libraries.
fn exported_targets() -> Targets {
    EXPORTED_CRATES.iter().fold(Targets::new(), |targets, name| targets.with_target(*name, LevelFilter::INFO))
}

/// A provider that batches spans and sends them to `endpoint` with the
/// configured headers, on a resource named for the service.
fn tracer_provider(service: &'static str, endpoint: &str, config: &TelemetryConfig) -> Result<SdkTracerProvider, TelemetryError> {
    let exporter = SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint)
        .with_headers(config.headers.iter().cloned().collect::<HashMap<_, _>>())
        .build()?;
    Ok(SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource(service, config)).build())
}

/// The resource every span names: the configured attributes, then the
/// service name (`OTEL_SERVICE_NAME` over the binary's own, as the
/// specification orders them).
fn resource(service: &'static str, config: &TelemetryConfig) -> Resource {
    let attributes = config.resource_attributes.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone()));
    let name = config.service_name.clone().unwrap_or_else(|| service.to_owned());
    Resource::builder_empty().with_attributes(attributes).with_service_name(name).build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_flotilla_spans_are_exported() {
        let targets = exported_targets();
        assert!(targets.would_enable("flotilla_worker::execute", &tracing::Level::INFO));
        assert!(!targets.would_enable("flotilla_worker::execute", &tracing::Level::DEBUG));
        assert!(!targets.would_enable("hyper_util::client", &tracing::Level::INFO));
    }
}
