//! The telemetry section: where traces are exported over OTLP/HTTP, read
//! from the variables every OpenTelemetry SDK honours. A signal's own
//! variable wins over the general one: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! is used as given, `OTEL_EXPORTER_OTLP_ENDPOINT` gets `/v1/traces`
//! appended; `OTEL_EXPORTER_OTLP_TRACES_HEADERS` replaces
//! `OTEL_EXPORTER_OTLP_HEADERS`. Headers and resource attributes are
//! `key=value` lists separated by commas, values percent-encoded.

use std::fmt;

use super::{ConfigError, Settings};

/// The path OTLP/HTTP collectors take traces at, under a base endpoint.
const TRACES_PATH: &str = "/v1/traces";

/// The settings of tracing export.
#[derive(Clone, Default)]
pub struct TelemetryConfig {
    /// The full URL spans are sent to; no export when unset.
    pub traces_endpoint: Option<String>,
    /// Headers sent with every export (often a collector's credentials).
    pub headers: Vec<(String, String)>,
    /// `OTEL_SERVICE_NAME`: replaces the binary's own name on its spans.
    pub service_name: Option<String>,
    /// `OTEL_RESOURCE_ATTRIBUTES`: more attributes of the process's resource.
    pub resource_attributes: Vec<(String, String)>,
}

impl fmt::Debug for TelemetryConfig {
    /// Header values are left out: they often hold credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let header_names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        f.debug_struct("TelemetryConfig")
            .field("traces_endpoint", &self.traces_endpoint)
            .field("headers", &header_names)
            .field("service_name", &self.service_name)
            .field("resource_attributes", &self.resource_attributes)
            .finish()
    }
}

impl TelemetryConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        let traces_endpoint = match s.url("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")? {
            Some(url) => Some(url),
            None => s.url("OTEL_EXPORTER_OTLP_ENDPOINT")?.map(|base| format!("{base}{TRACES_PATH}")),
        };
        let headers_var = if s.get("OTEL_EXPORTER_OTLP_TRACES_HEADERS").is_some() {
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS"
        } else {
            "OTEL_EXPORTER_OTLP_HEADERS"
        };
        Ok(Self {
            traces_endpoint,
            headers: key_values(s, headers_var)?,
            service_name: s.get("OTEL_SERVICE_NAME").map(|name| name.trim().to_owned()),
            resource_attributes: key_values(s, "OTEL_RESOURCE_ATTRIBUTES")?,
        })
    }
}

/// A `key=value,key2=value2` list with percent-encoded values; empty when unset.
fn key_values(s: &Settings, var: &str) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(raw) = s.get(var) else { return Ok(Vec::new()) };
    raw.split(',').filter(|entry| !entry.trim().is_empty()).map(|entry| key_value(var, entry)).collect()
}

fn key_value(var: &str, entry: &str) -> Result<(String, String), ConfigError> {
    let bad = |problem: &str| ConfigError::new(var, format!("{:?} {problem}", entry.trim()));
    let (key, value) = entry.split_once('=').ok_or_else(|| bad("is not key=value"))?;
    let key = key.trim();
    if key.is_empty() {
        return Err(bad("has no key"));
    }
    let value = percent_encoding::percent_decode_str(value.trim()).decode_utf8().map_err(|_| bad("is not UTF-8 once decoded"))?;
    Ok((key.to_owned(), value.into_owned()))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<TelemetryConfig, ConfigError> {
        TelemetryConfig::load(&Settings(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<HashMap<_, _>>()))
    }

    #[test]
    fn the_general_endpoint_gets_the_traces_path_and_the_traces_endpoint_is_taken_as_given() {
        let general = load(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318/")]).expect("config");
        assert_eq!(general.traces_endpoint.as_deref(), Some("http://collector:4318/v1/traces"));
        let both = load(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces.example/ingest"),
        ])
        .expect("config");
        assert_eq!(both.traces_endpoint.as_deref(), Some("https://traces.example/ingest"));
        assert_eq!(load(&[]).expect("config").traces_endpoint, None);
    }

    #[test]
    fn headers_and_attributes_are_decoded_and_the_traces_headers_win() {
        let config = load(&[
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-general=1"),
            ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20abc, x-team = ops"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=prod,team=a%2Cb"),
            ("OTEL_SERVICE_NAME", "fleet-eu"),
        ])
        .expect("config");
        assert_eq!(config.headers, [("authorization".into(), "Bearer abc".into()), ("x-team".into(), "ops".into())]);
        assert_eq!(config.resource_attributes, [("deployment.environment".into(), "prod".into()), ("team".into(), "a,b".into())]);
        assert_eq!(config.service_name.as_deref(), Some("fleet-eu"));
        assert!(!format!("{config:?}").contains("abc"), "header values stay out of debug output");
    }

    #[test]
    fn a_malformed_list_names_its_variable() {
        let err = load(&[("OTEL_RESOURCE_ATTRIBUTES", "team")]).expect_err("no value");
        assert!(err.to_string().contains("OTEL_RESOURCE_ATTRIBUTES"), "{err}");
        let err = load(&[("OTEL_EXPORTER_OTLP_HEADERS", "=x")]).expect_err("no key");
        assert!(err.to_string().contains("OTEL_EXPORTER_OTLP_HEADERS"), "{err}");
    }
}
