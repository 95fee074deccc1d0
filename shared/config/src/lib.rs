//! The one typed configuration of every Flotilla process.
//!
//! Values come from defaults, then an optional TOML file named by
//! `FLOTILLA_CONFIG`, then the environment, later sources winning. Every
//! setting is validated at load; a bad one is reported as one line naming the
//! variable. The loader takes the environment as an argument so tests never
//! touch the process environment.
//!
//! `Config` is made of sections, one struct per area, each in its own file
//! under `config/` with a `load(&Settings)` that reads its variables: `api`,
//! `worker`, `queue` (read by both), the providers (`sandbox`, `model`, `e2b`,
//! `s3`), `telemetry`, `tenants`, `templates`, `streams`, `webhooks` and `limits`. A new area adds a file there, one field here, its
//! variables to [`KNOWN_VARS`] and a row to the README's table.
//!
//! A TOML file names each setting by its key in [`KNOWN_VARS`], at the top
//! level (`worker_concurrency = 8`) or inside a table named after its section,
//! where the section's name may be left off the key (`[worker]` then
//! `concurrency = 8`, `[s3]` then `bucket = "shots"`, `[queue]` then
//! `lease_ms = 30000`).

use std::collections::HashMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

mod api;
pub mod apikey;
mod auth;
mod computer_use;
mod isolation;
mod limits;
mod live_view;
mod prices;
mod providers;
mod queue;
mod routing;
mod sandboxd;
mod scrub;
mod streams;
mod telemetry;
mod templates;
mod templates_builtin;
mod templates_config;
mod tenants;
mod webhooks;
mod worker;

pub use api::ApiConfig;
pub use auth::AuthConfig;
pub use computer_use::{
    AnthropicToolVersion, ComputerUseConfig, ImageHistorySetting, DEFAULT_CLAUDE_IMAGES, DEFAULT_GEMINI_IMAGES,
    DEFAULT_GEMINI_MODEL,
};
pub use isolation::{IsolationConfig, SandboxIsolation, SandboxNetwork};
pub use limits::Limits;
pub use live_view::LiveViewConfig;
pub use providers::{E2bAccount, ModelConfig, OpenAiToolVersion, ProfileKey, S3Config, SandboxConfig};
pub use queue::QueueConfig;
pub use routing::RoutingConfig;
pub use sandboxd::{SandboxdClient, SandboxdConfig, TlsFiles};
pub use streams::StreamsConfig;
pub use telemetry::TelemetryConfig;
pub use templates::{
    canonical_app_name, App, Template, TemplateFile, CHROMIUM_DEBUGGING_PORT, CHROMIUM_PROFILE_DIR, DEFAULT_TEMPLATE,
    DOWNLOADS_DIR, TERMINAL_TITLE,
};
pub use templates_config::{program_on_path, TemplatesConfig};
pub use tenants::{Rate, TenantSettings, TenantsConfig, DEFAULT_MAX_QUEUED, DEFAULT_MAX_SCHEDULES};
pub use webhooks::WebhooksConfig;
pub use worker::WorkerConfig;

/// Every variable the configuration reads, with the key a TOML file uses for it.
pub const KNOWN_VARS: &[(&str, &str)] = &[
    ("FLOTILLA_CONFIG", "config"),
    ("FLOTILLA_REDIS_URL", "redis_url"),
    ("FLOTILLA_KEY_PREFIX", "key_prefix"),
    ("FLOTILLA_API_ADDR", "api_addr"),
    ("FLOTILLA_API_KEYS", "api_keys"),
    ("FLOTILLA_API_KEY_SECRET", "api_key_secret"),
    ("FLOTILLA_API_KEYS_FILE", "api_keys_file"),
    ("FLOTILLA_ADMIN_KEY", "admin_key"),
    ("FLOTILLA_BODY_LIMIT", "body_limit"),
    ("FLOTILLA_BATCH_BODY_LIMIT", "batch_body_limit"),
    ("FLOTILLA_WORKER_CONCURRENCY", "worker_concurrency"),
    ("FLOTILLA_WORKER_ID", "worker_id"),
    ("FLOTILLA_WORKER_HTTP_ADDR", "worker_http_addr"),
    ("FLOTILLA_LEASE_MS", "lease_ms"),
    ("FLOTILLA_HEARTBEAT_MS", "heartbeat_ms"),
    ("FLOTILLA_DRAIN_DEADLINE_S", "drain_deadline_s"),
    ("FLOTILLA_PARK_WAITING_AFTER_MS", "park_waiting_after_ms"),
    ("FLOTILLA_RETENTION_S", "retention_s"),
    ("FLOTILLA_ARCHIVE_AFTER_S", "archive_after_s"),
    ("FLOTILLA_DEFAULT_PIPELINE", "default_pipeline"),
    ("FLOTILLA_RETRY_BASE_MS", "retry_base_ms"),
    ("FLOTILLA_RETRY_MAX_MS", "retry_max_ms"),
    ("FLOTILLA_SANDBOX_PROVIDER", "sandbox_provider"),
    ("FLOTILLA_SANDBOX_WARM", "sandbox_warm"),
    ("FLOTILLA_SANDBOX_MAX", "sandbox_max"),
    ("FLOTILLA_SANDBOX_FLEET_MAX", "sandbox_fleet_max"),
    ("FLOTILLA_SANDBOX_ISOLATION", "sandbox_isolation"),
    ("FLOTILLA_SANDBOX_NETWORK", "sandbox_network"),
    ("FLOTILLA_SANDBOX_MEMORY_MB", "sandbox_memory_mb"),
    ("FLOTILLA_SANDBOX_PIDS", "sandbox_pids"),
    ("FLOTILLA_SANDBOX_CPUS", "sandbox_cpus"),
    ("FLOTILLA_SANDBOX_HOME_MB", "sandbox_home_mb"),
    ("FLOTILLA_SANDBOX_TMP_MB", "sandbox_tmp_mb"),
    ("FLOTILLA_SANDBOX_DENY", "sandbox_deny"),
    ("FLOTILLA_SANDBOXD_ADDR", "sandboxd_addr"),
    ("FLOTILLA_SANDBOXD_EDGE_ADDR", "sandboxd_edge_addr"),
    ("FLOTILLA_SANDBOXD_DOMAIN", "sandboxd_domain"),
    ("FLOTILLA_SANDBOXD_KEYS", "sandboxd_keys"),
    ("FLOTILLA_SANDBOXD_TLS_CERT", "sandboxd_tls_cert"),
    ("FLOTILLA_SANDBOXD_TLS_KEY", "sandboxd_tls_key"),
    ("FLOTILLA_SANDBOXD_CAPACITY", "sandboxd_capacity"),
    ("FLOTILLA_SANDBOXD_POOL", "sandboxd_pool"),
    ("FLOTILLA_SANDBOXD_MAX_TIMEOUT_S", "sandboxd_max_timeout_s"),
    ("FLOTILLA_SANDBOXD_ROOT", "sandboxd_root"),
    ("FLOTILLA_SANDBOXD_URL", "sandboxd_url"),
    ("FLOTILLA_SANDBOXD_KEY", "sandboxd_key"),
    ("FLOTILLA_SANDBOXD_CA_CERT", "sandboxd_ca_cert"),
    ("FLOTILLA_S3_BUCKET", "s3_bucket"),
    ("FLOTILLA_S3_ENDPOINT", "s3_endpoint"),
    ("FLOTILLA_S3_PREFIX", "s3_prefix"),
    ("FLOTILLA_S3_URL_TTL_S", "s3_url_ttl_s"),
    ("FLOTILLA_PROFILE_KEY", "profile_key"),
    ("OPENAI_API_KEY", "openai_api_key"),
    ("OPENAI_BASE_URL", "openai_base_url"),
    ("FLOTILLA_OPENAI_TOOL", "openai_tool"),
    ("FLOTILLA_OPENAI_MODEL", "openai_model"),
    ("FLOTILLA_ANTHROPIC_TOOL", "anthropic_tool"),
    ("FLOTILLA_ANTHROPIC_MODEL", "anthropic_model"),
    ("FLOTILLA_MODEL_SCREEN", "model_screen"),
    ("ANTHROPIC_API_KEY", "anthropic_api_key"),
    ("ANTHROPIC_BASE_URL", "anthropic_base_url"),
    ("GEMINI_API_KEY", "gemini_api_key"),
    ("GEMINI_BASE_URL", "gemini_base_url"),
    ("FLOTILLA_GEMINI_MODEL", "gemini_model"),
    ("FLOTILLA_CLAUDE_KEEP_IMAGES", "claude_keep_images"),
    ("FLOTILLA_CLAUDE_DROP_IMAGES_BY", "claude_drop_images_by"),
    ("FLOTILLA_GEMINI_KEEP_IMAGES", "gemini_keep_images"),
    ("FLOTILLA_GEMINI_DROP_IMAGES_BY", "gemini_drop_images_by"),
    ("FLOTILLA_GATEWAY_ADDR", "gateway_addr"),
    ("FLOTILLA_GATEWAY_URL", "gateway_url"),
    ("E2B_API_KEY", "e2b_api_key"),
    ("E2B_DOMAIN", "e2b_domain"),
    ("E2B_API_URL", "e2b_api_url"),
    ("E2B_SANDBOX_URL", "e2b_sandbox_url"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint"),
    ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "otel_exporter_otlp_traces_endpoint"),
    ("OTEL_EXPORTER_OTLP_HEADERS", "otel_exporter_otlp_headers"),
    ("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "otel_exporter_otlp_traces_headers"),
    ("OTEL_SERVICE_NAME", "otel_service_name"),
    ("OTEL_RESOURCE_ATTRIBUTES", "otel_resource_attributes"),
    ("FLOTILLA_STREAMS_PER_TENANT", "streams_per_tenant"),
    ("FLOTILLA_STREAM_MAX_LIFETIME_S", "stream_max_lifetime_s"),
    ("FLOTILLA_WEBHOOK_ALLOW_HTTP", "webhook_allow_http"),
    ("FLOTILLA_WEBHOOK_ALLOW_PRIVATE", "webhook_allow_private"),
    ("FLOTILLA_WEBHOOK_RETRY_MS", "webhook_retry_ms"),
    ("FLOTILLA_WEBHOOK_LOG_MAX", "webhook_log_max"),
    ("RUST_LOG", "log"),
    ("FLOTILLA_TENANT_WEIGHTS", "tenant_weights"),
    ("FLOTILLA_REQUEST_TIMEOUT_MS", "request_timeout_ms"),
    ("FLOTILLA_API_CONCURRENCY", "api_concurrency"),
    ("FLOTILLA_TENANT_METRICS", "tenant_metrics"),
    ("FLOTILLA_VIEW_TOKEN_TTL_S", "view_token_ttl_s"),
    ("FLOTILLA_NOVNC_DIR", "novnc_dir"),
    ("FLOTILLA_PUBLIC_URL", "public_url"),
    ("FLOTILLA_WORKER_VIEW_URL", "worker_view_url"),
    ("FLOTILLA_WORKER_LABELS", "worker_labels"),
];

/// A value that must never be printed: its `Debug` and `Display` hide it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The secret itself, for the one place that must send it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// A setting that could not be used, named by its environment variable.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{var}: {problem}")]
pub struct ConfigError {
    pub var: String,
    pub problem: String,
}

impl ConfigError {
    fn new(var: &str, problem: impl Into<String>) -> Self {
        Self { var: var.to_owned(), problem: flotilla_types::redact::redact(&problem.into()).into_owned() }
    }
}

/// Where Redis lives: one server, or the seed nodes of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    Cluster(Vec<String>),
}

/// The configuration of the API and the workers, by section.
#[derive(Debug, Clone)]
pub struct Config {
    /// `FLOTILLA_REDIS_URL`.
    pub redis: RedisTarget,
    /// `FLOTILLA_KEY_PREFIX`: prefix of every Redis key and pub/sub channel;
    /// tests set a unique one.
    pub key_prefix: String,
    pub api: ApiConfig,
    /// API keys (as digests), the keys file the API reloads, the admin key.
    pub auth: AuthConfig,
    pub worker: WorkerConfig,
    pub queue: QueueConfig,
    pub sandbox: SandboxConfig,
    pub model: ModelConfig,
    /// Claude's tool override and the Gemini API.
    pub computer_use: ComputerUseConfig,
    pub e2b: E2bAccount,
    pub s3: S3Config,
    pub telemetry: TelemetryConfig,
    /// Limits on the API's event streams.
    pub streams: StreamsConfig,
    /// Live views of tasks' desktops.
    pub live_view: LiveViewConfig,
    /// Webhook targets and retries.
    pub webhooks: WebhooksConfig,
    /// How local sandboxes are walled off from the host and each other.
    pub isolation: IsolationConfig,
    /// Per-tenant weights and limits (`[tenants.<name>]` in the file).
    pub tenants: TenantsConfig,
    /// Sandbox templates: the built-ins and `[templates.<name>]` in the file.
    pub templates: TemplatesConfig,
    /// What each model's tokens cost (`[prices."<model>"]` in the file,
    /// over the shipped defaults).
    pub prices: flotilla_types::cost::PriceTable,
    /// Request bounds of the API.
    pub limits: Limits,
    /// The labels a worker advertises for capability routing.
    pub routing: RoutingConfig,
    /// The sandbox host's settings (`flotilla-sandboxd`).
    pub sandboxd: SandboxdConfig,
    /// The sandbox host a worker's `local` provider takes desktops from;
    /// none: the worker starts its desktops itself.
    pub sandboxd_client: Option<SandboxdClient>,
    /// The clock of what turns with the UTC day; not a setting (the
    /// system's, which tests move).
    pub clock: flotilla_types::clock::Clock,
}

impl Config {
    /// Loads the configuration from these environment variables (and the TOML
    /// file one of them may name).
    pub fn from_env<I, K, V>(vars: I) -> Result<Self, ConfigError>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut env: HashMap<String, String> = vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let (mut settings, tables) = match env.get("FLOTILLA_CONFIG") {
            Some(path) => read_toml_file(Path::new(path))?,
            None => (HashMap::new(), Tables::default()),
        };
        for (var, _) in KNOWN_VARS {
            if let Some(value) = env.get(*var) {
                settings.insert((*var).to_owned(), value.clone());
            }
        }
        let mut settings = Settings(settings);
        let loaded = TenantsConfig::load(tables.tenants, settings.get("FLOTILLA_TENANT_WEIGHTS")).and_then(|tenants| {
            let config = Self {
                tenants,
                prices: prices::load(tables.prices)?,
                templates: TemplatesConfig::load(tables.templates)?,
                ..Self::from_settings(&settings)?
            };
            config.check_warm_templates()?;
            Ok(config)
        });
        wipe_secrets(&mut settings.0);
        wipe_secrets(&mut env);
        loaded
    }

    /// Loads the configuration from the process environment, then takes the
    /// variables that carry key material out of it (see `config/scrub.rs`).
    pub fn from_process_env() -> Result<Self, ConfigError> {
        let config = Self::from_env(std::env::vars());
        if let Err(e) = scrub::scrub_process_env(&KEY_MATERIAL) {
            eprintln!("warning: {e}");
        }
        config
    }

    /// Every template given a warm count is one this process knows.
    fn check_warm_templates(&self) -> Result<(), ConfigError> {
        match self.sandbox.warm.keys().find(|name| self.templates.get(name).is_none()) {
            Some(name) => Err(ConfigError::new(
                "FLOTILLA_SANDBOX_WARM",
                format!("{name:?} is not a template (built-in or [templates.<name>])"),
            )),
            None => Ok(()),
        }
    }

    fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: parse_redis_target(s.text("FLOTILLA_REDIS_URL", "redis://127.0.0.1:6379"))?,
            key_prefix: parse_key_prefix(s.text("FLOTILLA_KEY_PREFIX", "flotilla"))?,
            api: ApiConfig::load(s)?,
            auth: AuthConfig::load(s)?,
            worker: WorkerConfig::load(s)?,
            queue: QueueConfig::load(s)?,
            sandbox: SandboxConfig::load(s)?,
            model: ModelConfig::load(s)?,
            computer_use: ComputerUseConfig::from_settings(s)?,
            e2b: E2bAccount::load(s)?,
            s3: S3Config::load(s)?,
            telemetry: TelemetryConfig::load(s)?,
            streams: StreamsConfig::from_settings(s)?,
            live_view: LiveViewConfig::from_settings(s)?,
            webhooks: WebhooksConfig::from_settings(s)?,
            isolation: IsolationConfig::from_settings(s)?,
            tenants: TenantsConfig::default(),
            templates: TemplatesConfig::default(),
            prices: flotilla_types::cost::PriceTable::defaults(),
            limits: Limits::from_settings(s)?,
            routing: RoutingConfig::from_settings(s)?,
            sandboxd: SandboxdConfig::load(s)?,
            sandboxd_client: SandboxdClient::load(s)?,
            clock: flotilla_types::clock::Clock::default(),
        })
    }

    /// The API refuses to start without at least one key.
    pub fn require_api_keys(&self) -> Result<(), ConfigError> {
        if !self.auth.has_keys() {
            return Err(ConfigError::new(
                "FLOTILLA_API_KEYS",
                "is required (or FLOTILLA_API_KEYS_FILE): key=tenant[,key2=tenant2]",
            ));
        }
        Ok(())
    }
}

/// Settings by environment-variable name, as text.
struct Settings(HashMap<String, String>);

impl Settings {
    fn get(&self, var: &str) -> Option<&str> {
        self.0.get(var).map(String::as_str).filter(|v| !v.trim().is_empty())
    }

    fn text<'a>(&'a self, var: &str, default: &'a str) -> &'a str {
        self.get(var).unwrap_or(default)
    }

    fn parsed<T: std::str::FromStr>(&self, var: &str, default: &str, expected: &str) -> Result<T, ConfigError> {
        let raw = self.text(var, default);
        raw.trim().parse().map_err(|_| ConfigError::new(var, format!("{raw:?} is not {expected}")))
    }

    fn count(&self, var: &str, default: usize) -> Result<usize, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(raw) => raw.trim().parse::<usize>().map_err(|_| ConfigError::new(var, format!("{raw:?} is not a whole number"))),
        }
    }

    fn positive(&self, var: &str, default: usize) -> Result<usize, ConfigError> {
        match self.get(var) {
            None => Ok(default),
            Some(raw) => match raw.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(ConfigError::new(var, format!("{raw:?} is not a positive whole number"))),
            },
        }
    }

    fn millis(&self, var: &str, default: u64) -> Result<Duration, ConfigError> {
        Ok(Duration::from_millis(self.positive(var, default as usize)? as u64))
    }

    fn url(&self, var: &str) -> Result<Option<String>, ConfigError> {
        let Some(raw) = self.get(var) else { return Ok(None) };
        if raw.starts_with("http://") || raw.starts_with("https://") {
            Ok(Some(raw.trim_end_matches('/').to_owned()))
        } else {
            Err(ConfigError::new(var, format!("{raw:?} is not an http:// or https:// URL")))
        }
    }
}

/// The tables of the file that are not sections of settings.
#[derive(Default)]
struct Tables {
    /// `[tenants.<name>]`.
    tenants: Option<toml::Value>,
    /// `[prices."<model>"]`.
    prices: Option<toml::Value>,
    /// `[templates.<name>]`.
    templates: Option<toml::Value>,
}

/// The file's flat settings by variable name, and its `tenants`,
/// `prices` and `templates` tables.
fn read_toml_file(path: &Path) -> Result<(HashMap<String, String>, Tables), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("FLOTILLA_CONFIG", format!("cannot read {}: {e}", path.display())))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::new("FLOTILLA_CONFIG", format!("{}: {}", path.display(), e.message())))?;
    let bad = |problem: String| ConfigError::new("FLOTILLA_CONFIG", format!("{}: {problem}", path.display()));
    let mut settings = HashMap::new();
    let mut tables = Tables::default();
    for (key, value) in table {
        if key == "tenants" {
            tables.tenants = Some(value);
            continue;
        }
        if key == "prices" {
            tables.prices = Some(value);
            continue;
        }
        if key == "templates" {
            tables.templates = Some(value);
            continue;
        }
        let toml::Value::Table(section) = value else {
            let var = known_var(None, &key).ok_or_else(|| bad(format!("unknown setting {key:?}")))?;
            settings.insert(var.to_owned(), toml_text(&key, value).map_err(bad)?);
            continue;
        };
        for (inner, value) in section {
            let var = known_var(Some(&key), &inner).ok_or_else(|| bad(format!("unknown setting {inner:?} in [{key}]")))?;
            settings.insert(var.to_owned(), toml_text(&inner, value).map_err(bad)?);
        }
    }
    Ok((settings, tables))
}

/// The variable a TOML key stands for: `key` itself, or inside a `[section]`
/// table also `section_key`.
fn known_var(section: Option<&str>, key: &str) -> Option<&'static str> {
    let find = |wanted: &str| KNOWN_VARS.iter().find(|(_, k)| *k == wanted).map(|(var, _)| *var);
    section.and_then(|s| find(&format!("{s}_{key}"))).or_else(|| find(key))
}

fn toml_text(key: &str, value: toml::Value) -> Result<String, String> {
    match value {
        toml::Value::String(s) => Ok(s),
        toml::Value::Integer(n) => Ok(n.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!("{key} must be a string or number, not {}", other.type_str())),
    }
}

/// The settings that hold key material: the API keys, the secret they are
/// digested with, the admin key (only digests of them are kept), the
/// sandbox host's keys and the key that seals saved browser profiles.
const KEY_MATERIAL: [&str; 5] =
    ["FLOTILLA_API_KEYS", "FLOTILLA_API_KEY_SECRET", "FLOTILLA_ADMIN_KEY", "FLOTILLA_SANDBOXD_KEYS", "FLOTILLA_PROFILE_KEY"];

/// Overwrites the text of settings that hold API key material once it is
/// digested or copied, so no stray copy outlives the load.
fn wipe_secrets(settings: &mut HashMap<String, String>) {
    use zeroize::Zeroize;
    for var in KEY_MATERIAL {
        if let Some(value) = settings.get_mut(var) {
            value.zeroize();
        }
    }
}

fn parse_redis_target(raw: &str) -> Result<RedisTarget, ConfigError> {
    let urls: Vec<String> = raw.split(',').map(|u| u.trim().to_owned()).filter(|u| !u.is_empty()).collect();
    for url in &urls {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(ConfigError::new("FLOTILLA_REDIS_URL", format!("{url:?} is not a redis:// or rediss:// URL")));
        }
    }
    match urls.len() {
        0 => Err(ConfigError::new("FLOTILLA_REDIS_URL", "is empty")),
        1 => Ok(RedisTarget::Single(urls[0].clone())),
        _ => Ok(RedisTarget::Cluster(urls)),
    }
}

fn parse_key_prefix(raw: &str) -> Result<String, ConfigError> {
    let ok = raw.len() <= 64 && raw.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'));
    if ok {
        Ok(raw.to_owned())
    } else {
        Err(ConfigError::new("FLOTILLA_KEY_PREFIX", "must be at most 64 of A-Z a-z 0-9 - _ : ."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_types::ids::TenantId;
    use flotilla_types::task::SandboxProviderKind;

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_env(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    /// Finding "API keys": the plaintext keys stayed in the configuration
    /// for the life of the process. The texts of the key settings are
    /// zeroized once digested (other settings are left alone), and nothing
    /// the configuration keeps shows a key, the admin key or the secret.
    #[test]
    fn key_material_is_zeroized_once_digested_and_never_kept() {
        let key = "flt_acme0000000000000000000000000000000";
        let admin = "flt_admin000000000000000000000000000000";
        let secret = "a server secret of at least thirty-two bytes";
        let mut settings: HashMap<String, String> = [
            ("FLOTILLA_API_KEYS", format!("{key}=acme")),
            ("FLOTILLA_API_KEY_SECRET", secret.to_owned()),
            ("FLOTILLA_ADMIN_KEY", admin.to_owned()),
            ("FLOTILLA_SANDBOXD_KEYS", "e2b_0123456789abcdef".to_owned()),
            ("FLOTILLA_PROFILE_KEY", "ab".repeat(32)),
            ("FLOTILLA_REDIS_URL", "redis://127.0.0.1:1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        wipe_secrets(&mut settings);
        for var in KEY_MATERIAL {
            assert_eq!(settings[var], "", "{var} is wiped");
        }
        assert_eq!(settings["FLOTILLA_REDIS_URL"], "redis://127.0.0.1:1", "other settings stay");

        let config = load(&[
            ("FLOTILLA_API_KEYS", &format!("{key}=acme")),
            ("FLOTILLA_API_KEY_SECRET", secret),
            ("FLOTILLA_ADMIN_KEY", admin),
        ])
        .expect("loads");
        let shown = format!("{config:?}");
        for text in [key, admin, secret, &key[4..], &admin[4..]] {
            assert!(!shown.contains(text), "{text} is kept in the configuration");
        }
    }

    #[test]
    fn defaults_need_no_environment() {
        let config = load(&[]).expect("defaults load");
        assert_eq!(config.redis, RedisTarget::Single("redis://127.0.0.1:6379".into()));
        assert_eq!(config.key_prefix, "flotilla");
        assert_eq!(config.queue.retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(config.api.body_limit, 1024 * 1024);
        assert_eq!(config.api.batch_body_limit, 8 * 1024 * 1024);
    }

    #[test]
    fn a_bad_setting_names_its_variable() {
        let err = load(&[("FLOTILLA_WORKER_CONCURRENCY", "many")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_WORKER_CONCURRENCY");
        let err = load(&[("FLOTILLA_REDIS_URL", "http://x")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_REDIS_URL");
        let err = load(&[("FLOTILLA_API_KEYS", "nokey")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_API_KEYS");
        let err = load(&[("OPENAI_BASE_URL", "localhost:1")]).expect_err("refused");
        assert_eq!(err.var, "OPENAI_BASE_URL");
        let err = load(&[("FLOTILLA_MODEL_SCREEN", "big")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_MODEL_SCREEN");
        let err = load(&[("FLOTILLA_ANTHROPIC_TOOL", "computer_2099")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_ANTHROPIC_TOOL");
        let err = load(&[("FLOTILLA_SANDBOX_PROVIDER", "docker")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_SANDBOX_PROVIDER");
    }

    #[test]
    fn sandboxes_are_off_unless_a_provider_is_named() {
        let config = load(&[]).expect("defaults load");
        assert_eq!(config.sandbox.provider, None);
        let config = load(&[("FLOTILLA_SANDBOX_PROVIDER", "local"), ("FLOTILLA_SANDBOX_WARM", "2")]).expect("loads");
        assert_eq!(config.sandbox.provider, Some(SandboxProviderKind::Local));
        assert_eq!(config.sandbox.warm_of("desktop"), 2);
    }

    #[test]
    fn warm_counts_are_given_per_template_and_name_known_templates() {
        let config = load(&[("FLOTILLA_SANDBOX_WARM", "desktop=1, browser=2")]).expect("loads");
        assert_eq!((config.sandbox.warm_of("desktop"), config.sandbox.warm_of("browser")), (1, 2));
        assert_eq!((config.sandbox.warm_of("office"), config.sandbox.warm_total()), (0, 3));
        for bad in ["browser=two", "browser", "browser=1,kiosk=1", "browser=1,browser=2", "-1"] {
            let err = load(&[("FLOTILLA_SANDBOX_WARM", bad)]).expect_err(bad);
            assert_eq!(err.var, "FLOTILLA_SANDBOX_WARM", "{bad}");
        }
    }

    #[test]
    fn the_fleet_cap_is_off_unless_set_and_must_be_positive() {
        assert_eq!(load(&[]).expect("defaults load").sandbox.fleet_max, None);
        let config = load(&[("FLOTILLA_SANDBOX_FLEET_MAX", "20")]).expect("loads");
        assert_eq!(config.sandbox.fleet_max, Some(20));
        let err = load(&[("FLOTILLA_SANDBOX_FLEET_MAX", "0")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_SANDBOX_FLEET_MAX");
    }

    #[test]
    fn a_url_list_is_a_cluster() {
        let config = load(&[("FLOTILLA_REDIS_URL", "redis://a:1,redis://b:2")]).expect("loads");
        assert_eq!(config.redis, RedisTarget::Cluster(vec!["redis://a:1".into(), "redis://b:2".into()]));
    }

    #[test]
    fn the_environment_overrides_the_file() {
        let dir = std::env::temp_dir().join(format!("flotilla-config-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("flotilla.toml");
        std::fs::write(&path, "worker_concurrency = 9\nkey_prefix = \"fromfile\"\n").expect("write");
        let path = path.to_string_lossy().to_string();
        let config = load(&[("FLOTILLA_CONFIG", &path), ("FLOTILLA_KEY_PREFIX", "fromenv")]).expect("loads");
        assert_eq!(config.worker.concurrency, 9);
        assert_eq!(config.key_prefix, "fromenv");
        std::fs::write(dir.join("bad.toml"), "colour = \"red\"\n").expect("write");
        let bad = dir.join("bad.toml").to_string_lossy().to_string();
        let err = load(&[("FLOTILLA_CONFIG", &bad)]).expect_err("refused");
        assert!(err.problem.contains("unknown setting \"colour\""), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_file_may_group_settings_in_section_tables() {
        let dir = std::env::temp_dir().join(format!("flotilla-config-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("flotilla.toml");
        let text = "key_prefix = \"top\"\n[worker]\nconcurrency = 7\n[queue]\nlease_ms = 9000\n[s3]\nbucket = \"shots\"\n\
                    [model]\nanthropic_model = \"m\"\n";
        std::fs::write(&path, text).expect("write");
        let config = load(&[("FLOTILLA_CONFIG", &path.to_string_lossy())]).expect("loads");
        assert_eq!(config.key_prefix, "top");
        assert_eq!(config.worker.concurrency, 7);
        assert_eq!(config.queue.lease, Duration::from_millis(9000));
        assert_eq!(config.s3.bucket.as_deref(), Some("shots"));
        assert_eq!(config.model.anthropic_model, "m");
        std::fs::write(&path, "[worker]\ncolour = 1\n").expect("write");
        let err = load(&[("FLOTILLA_CONFIG", &path.to_string_lossy())]).expect_err("refused");
        assert!(err.problem.contains("unknown setting \"colour\" in [worker]"), "{err}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn the_file_holds_tenant_tables_and_the_environment_a_weight_shorthand() {
        let dir = std::env::temp_dir().join(format!("flotilla-config-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("flotilla.toml");
        std::fs::write(&path, "worker_concurrency = 2\n[tenants.acme]\nweight = 2\nmax_running = 3\n").expect("write");
        let path = path.to_string_lossy().to_string();
        let config = load(&[("FLOTILLA_CONFIG", &path), ("FLOTILLA_TENANT_WEIGHTS", "beta=5")]).expect("loads");
        let acme = config.tenants.get(&TenantId::parse("acme").expect("tenant"));
        assert_eq!((acme.weight, acme.max_running), (2, Some(3)));
        assert_eq!(config.tenants.get(&TenantId::parse("beta").expect("tenant")).weight, 5);
        std::fs::write(dir.join("bad.toml"), "[tenants.acme]\nmax_running = \"many\"\n").expect("write");
        let bad = dir.join("bad.toml").to_string_lossy().to_string();
        let err = load(&[("FLOTILLA_CONFIG", &bad)]).expect_err("refused");
        assert_eq!(err.var, "tenants.acme.max_running");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_waiting_task_is_parked_after_a_minute_unless_set_and_never_after_zero() {
        assert_eq!(load(&[]).expect("defaults").worker.park_waiting_after, Duration::from_secs(60));
        let set = load(&[("FLOTILLA_PARK_WAITING_AFTER_MS", "1500")]).expect("loads");
        assert_eq!(set.worker.park_waiting_after, Duration::from_millis(1500));
        let err = load(&[("FLOTILLA_PARK_WAITING_AFTER_MS", "0")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_PARK_WAITING_AFTER_MS");
        let err = load(&[("FLOTILLA_PARK_WAITING_AFTER_MS", "soon")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_PARK_WAITING_AFTER_MS");
    }

    #[test]
    fn heartbeat_must_beat_within_the_lease() {
        let err = load(&[("FLOTILLA_LEASE_MS", "1000"), ("FLOTILLA_HEARTBEAT_MS", "2000")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_HEARTBEAT_MS");
    }
}
