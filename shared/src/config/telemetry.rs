//! The telemetry section: where traces are exported over OTLP/HTTP.

use super::{ConfigError, Settings};

/// The settings of tracing export.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`: the collector's base URL, such as
    /// `http://collector:4318`; no export when unset.
    pub otlp_endpoint: Option<String>,
}

impl TelemetryConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self { otlp_endpoint: s.url("OTEL_EXPORTER_OTLP_ENDPOINT")? })
    }
}
