//! The one typed configuration of every Flotilla process.
//!
//! Values come from defaults, then an optional TOML file named by
//! `FLOTILLA_CONFIG`, then the environment, later sources winning. Every
//! setting is validated at load; a bad one is reported as one line naming the
//! variable. The loader takes the environment as an argument so tests never
//! touch the process environment.

use std::collections::HashMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

mod live_view;

pub use live_view::LiveViewConfig;
mod streams;

pub use streams::StreamsConfig;

use crate::ids::TenantId;
use crate::task::{Pipeline, SandboxProviderKind};

mod tenants;

pub use tenants::{TenantSettings, TenantsConfig};

/// Every variable the configuration reads, with the key a TOML file uses for it.
pub const KNOWN_VARS: &[(&str, &str)] = &[
    ("FLOTILLA_CONFIG", "config"),
    ("FLOTILLA_REDIS_URL", "redis_url"),
    ("FLOTILLA_KEY_PREFIX", "key_prefix"),
    ("FLOTILLA_API_ADDR", "api_addr"),
    ("FLOTILLA_API_KEYS", "api_keys"),
    ("FLOTILLA_BODY_LIMIT", "body_limit"),
    ("FLOTILLA_BATCH_BODY_LIMIT", "batch_body_limit"),
    ("FLOTILLA_WORKER_CONCURRENCY", "worker_concurrency"),
    ("FLOTILLA_WORKER_ID", "worker_id"),
    ("FLOTILLA_WORKER_HTTP_ADDR", "worker_http_addr"),
    ("FLOTILLA_LEASE_MS", "lease_ms"),
    ("FLOTILLA_HEARTBEAT_MS", "heartbeat_ms"),
    ("FLOTILLA_DRAIN_DEADLINE_S", "drain_deadline_s"),
    ("FLOTILLA_RETENTION_S", "retention_s"),
    ("FLOTILLA_DEFAULT_PIPELINE", "default_pipeline"),
    ("FLOTILLA_RETRY_BASE_MS", "retry_base_ms"),
    ("FLOTILLA_RETRY_MAX_MS", "retry_max_ms"),
    ("FLOTILLA_SANDBOX_PROVIDER", "sandbox_provider"),
    ("FLOTILLA_SANDBOX_WARM", "sandbox_warm"),
    ("FLOTILLA_SANDBOX_MAX", "sandbox_max"),
    ("FLOTILLA_SANDBOX_FLEET_MAX", "sandbox_fleet_max"),
    ("FLOTILLA_S3_BUCKET", "s3_bucket"),
    ("FLOTILLA_S3_ENDPOINT", "s3_endpoint"),
    ("FLOTILLA_S3_PREFIX", "s3_prefix"),
    ("FLOTILLA_S3_URL_TTL_S", "s3_url_ttl_s"),
    ("OPENAI_API_KEY", "openai_api_key"),
    ("OPENAI_BASE_URL", "openai_base_url"),
    ("FLOTILLA_OPENAI_TOOL", "openai_tool"),
    ("FLOTILLA_OPENAI_MODEL", "openai_model"),
    ("FLOTILLA_ANTHROPIC_TOOL", "anthropic_tool"),
    ("FLOTILLA_ANTHROPIC_MODEL", "anthropic_model"),
    ("FLOTILLA_MODEL_SCREEN", "model_screen"),
    ("ANTHROPIC_API_KEY", "anthropic_api_key"),
    ("ANTHROPIC_BASE_URL", "anthropic_base_url"),
    ("FLOTILLA_GATEWAY_ADDR", "gateway_addr"),
    ("FLOTILLA_GATEWAY_URL", "gateway_url"),
    ("E2B_API_KEY", "e2b_api_key"),
    ("E2B_DOMAIN", "e2b_domain"),
    ("OTEL_EXPORTER_OTLP_ENDPOINT", "otel_exporter_otlp_endpoint"),
    ("FLOTILLA_STREAMS_PER_TENANT", "streams_per_tenant"),
    ("FLOTILLA_STREAM_MAX_LIFETIME_S", "stream_max_lifetime_s"),
    ("RUST_LOG", "log"),
    ("FLOTILLA_VIEW_TOKEN_TTL_S", "view_token_ttl_s"),
    ("FLOTILLA_NOVNC_DIR", "novnc_dir"),
    ("FLOTILLA_PUBLIC_URL", "public_url"),
    ("FLOTILLA_WORKER_VIEW_URL", "worker_view_url"),
    ("FLOTILLA_TENANT_WEIGHTS", "tenant_weights"),
];

/// The OpenAI computer tool generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenAiToolVersion {
    /// The GA `computer` tool, whose calls may batch actions.
    Ga,
    /// `computer_use_preview` with model `computer-use-preview`.
    Preview,
}

/// The Anthropic computer tool version (and so its beta header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnthropicToolVersion {
    V20250124,
    V20251124,
}

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
        Self { var: var.to_owned(), problem: problem.into() }
    }
}

/// Where Redis lives: one server, or the seed nodes of a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    Single(String),
    Cluster(Vec<String>),
}

/// The configuration of the API and the workers.
#[derive(Debug, Clone)]
pub struct Config {
    pub redis: RedisTarget,
    /// Prefix of every Redis key and pub/sub channel; tests set a unique one.
    pub key_prefix: String,
    pub api_addr: SocketAddr,
    /// API key → tenant.
    pub api_keys: Vec<(Secret, TenantId)>,
    pub body_limit: usize,
    /// The largest body of `POST /v1/batches`, which carries many specs.
    pub batch_body_limit: usize,
    pub worker_concurrency: usize,
    pub worker_id: String,
    /// Where a worker serves `/metrics`, `/healthz` and `/readyz`; none when unset.
    pub worker_http_addr: Option<SocketAddr>,
    /// How long a claimed task may go without a heartbeat before another
    /// worker reclaims it.
    pub lease: Duration,
    pub heartbeat: Duration,
    /// How long a stopping worker lets running tasks finish.
    pub drain_deadline: Duration,
    /// How long a finished task, its events and its idempotency record are kept.
    pub retention: Duration,
    pub default_pipeline: Pipeline,
    pub retry_base: Duration,
    pub retry_max: Duration,
    /// Where tasks get desktops; none: only tasks that need no screen run.
    pub sandbox_provider: Option<SandboxProviderKind>,
    /// Ready sandboxes each worker keeps in its warm pool.
    pub sandbox_warm: usize,
    /// Sandboxes one worker may hold at once, pooled ones included.
    pub sandbox_max: usize,
    /// Sandboxes the whole fleet may hold at once (a provider's concurrency
    /// limit), counted in Redis; no fleet-wide cap when unset.
    pub sandbox_fleet_max: Option<usize>,
    pub s3_bucket: Option<String>,
    pub s3_endpoint: Option<String>,
    pub s3_prefix: String,
    /// How long the presigned URLs the API hands out stay valid.
    pub s3_url_ttl: Duration,
    pub openai_api_key: Option<Secret>,
    pub openai_base_url: String,
    /// Which OpenAI computer tool: `ga` (the `computer` tool) or `preview`
    /// (`computer_use_preview`).
    pub openai_tool: OpenAiToolVersion,
    /// The model for `openai-cua` tasks that name none; the tool's default when unset.
    pub openai_model: Option<String>,
    pub anthropic_tool: AnthropicToolVersion,
    /// The model for `claude-computer-use` tasks that name none.
    pub anthropic_model: String,
    /// The largest screen a model is shown; bigger screens are scaled down.
    pub model_screen: (u32, u32),
    pub anthropic_api_key: Option<Secret>,
    pub anthropic_base_url: String,
    /// Where a worker's model gateway listens: the address sandboxes call
    /// instead of the model provider, with a token scoped to their task.
    pub gateway_addr: SocketAddr,
    /// The gateway's URL as sandboxes reach it; by default
    /// `http://<gateway_addr>`, right for local sandboxes on the host's
    /// network. Remote sandboxes need an address they can reach.
    pub gateway_url: Option<String>,
    pub e2b_api_key: Option<Secret>,
    pub e2b_domain: String,
    pub otlp_endpoint: Option<String>,
    /// Live views of tasks' desktops.
    pub live_view: LiveViewConfig,
    /// Limits on the API's event streams.
    pub streams: StreamsConfig,
    /// Per-tenant weights and limits (`[tenants.<name>]` in the file).
    pub tenants: TenantsConfig,
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
        let env: HashMap<String, String> = vars.into_iter().map(|(k, v)| (k.into(), v.into())).collect();
        let (mut settings, tenants_table) = match env.get("FLOTILLA_CONFIG") {
            Some(path) => read_toml_file(Path::new(path))?,
            None => (HashMap::new(), None),
        };
        for (var, _) in KNOWN_VARS {
            if let Some(value) = env.get(*var) {
                settings.insert((*var).to_owned(), value.clone());
            }
        }
        let settings = Settings(settings);
        let tenants = TenantsConfig::load(tenants_table, settings.get("FLOTILLA_TENANT_WEIGHTS"))?;
        Ok(Self { tenants, ..Self::from_settings(&settings)? })
    }

    /// Loads the configuration from the process environment.
    pub fn from_process_env() -> Result<Self, ConfigError> {
        Self::from_env(std::env::vars())
    }

    fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let lease = s.millis("FLOTILLA_LEASE_MS", 30_000)?;
        let heartbeat = match s.get("FLOTILLA_HEARTBEAT_MS") {
            Some(_) => s.millis("FLOTILLA_HEARTBEAT_MS", 1_000)?,
            None => (lease / 3).min(Duration::from_secs(1)),
        };
        if heartbeat >= lease {
            return Err(ConfigError::new("FLOTILLA_HEARTBEAT_MS", "must be shorter than FLOTILLA_LEASE_MS"));
        }
        let retry_base = s.millis("FLOTILLA_RETRY_BASE_MS", 1_000)?;
        let retry_max = s.millis("FLOTILLA_RETRY_MAX_MS", 60_000)?;
        if retry_max < retry_base {
            return Err(ConfigError::new("FLOTILLA_RETRY_MAX_MS", "must not be below FLOTILLA_RETRY_BASE_MS"));
        }
        Ok(Self {
            redis: parse_redis_target(s.text("FLOTILLA_REDIS_URL", "redis://127.0.0.1:6379"))?,
            key_prefix: parse_key_prefix(s.text("FLOTILLA_KEY_PREFIX", "flotilla"))?,
            api_addr: s.parsed("FLOTILLA_API_ADDR", "127.0.0.1:8080", "a socket address like 127.0.0.1:8080")?,
            api_keys: parse_api_keys(s.text("FLOTILLA_API_KEYS", ""))?,
            body_limit: s.positive("FLOTILLA_BODY_LIMIT", 1024 * 1024)?,
            batch_body_limit: s.positive("FLOTILLA_BATCH_BODY_LIMIT", 64 * 1024 * 1024)?,
            worker_concurrency: s.positive("FLOTILLA_WORKER_CONCURRENCY", 4)?,
            worker_id: parse_worker_id(s.get("FLOTILLA_WORKER_ID"))?,
            worker_http_addr: match s.get("FLOTILLA_WORKER_HTTP_ADDR") {
                Some(_) => Some(s.parsed("FLOTILLA_WORKER_HTTP_ADDR", "", "a socket address like 0.0.0.0:9090")?),
                None => None,
            },
            lease,
            heartbeat,
            drain_deadline: Duration::from_secs(s.positive("FLOTILLA_DRAIN_DEADLINE_S", 25)? as u64),
            retention: Duration::from_secs(s.positive("FLOTILLA_RETENTION_S", 7 * 24 * 3600)? as u64),
            default_pipeline: s.parsed(
                "FLOTILLA_DEFAULT_PIPELINE",
                "scripted",
                "one of openai-cua, claude-computer-use, claude-code, scripted",
            )?,
            retry_base,
            retry_max,
            sandbox_provider: parse_sandbox_provider(s.get("FLOTILLA_SANDBOX_PROVIDER"))?,
            sandbox_warm: s.count("FLOTILLA_SANDBOX_WARM", 0)?,
            sandbox_max: s.positive("FLOTILLA_SANDBOX_MAX", 16)?,
            sandbox_fleet_max: match s.get("FLOTILLA_SANDBOX_FLEET_MAX") {
                Some(_) => Some(s.positive("FLOTILLA_SANDBOX_FLEET_MAX", 1)?),
                None => None,
            },
            s3_bucket: s.get("FLOTILLA_S3_BUCKET").map(str::to_owned),
            s3_endpoint: s.url("FLOTILLA_S3_ENDPOINT")?,
            s3_prefix: s.text("FLOTILLA_S3_PREFIX", "").to_owned(),
            s3_url_ttl: Duration::from_secs(match s.positive("FLOTILLA_S3_URL_TTL_S", 3600)? {
                n if n <= 7 * 24 * 3600 => n as u64,
                _ => return Err(ConfigError::new("FLOTILLA_S3_URL_TTL_S", "must be at most 604800 (7 days)")),
            }),
            openai_api_key: s.get("OPENAI_API_KEY").map(Secret::new),
            openai_base_url: s.url("OPENAI_BASE_URL")?.unwrap_or_else(|| "https://api.openai.com/v1".into()),
            openai_tool: match s.text("FLOTILLA_OPENAI_TOOL", "ga").trim() {
                "ga" => OpenAiToolVersion::Ga,
                "preview" => OpenAiToolVersion::Preview,
                other => return Err(ConfigError::new("FLOTILLA_OPENAI_TOOL", format!("{other:?} is not one of ga, preview"))),
            },
            openai_model: s.get("FLOTILLA_OPENAI_MODEL").map(|m| m.trim().to_owned()),
            anthropic_tool: match s.text("FLOTILLA_ANTHROPIC_TOOL", "computer_20251124").trim() {
                "computer_20251124" => AnthropicToolVersion::V20251124,
                "computer_20250124" => AnthropicToolVersion::V20250124,
                other => {
                    return Err(ConfigError::new(
                        "FLOTILLA_ANTHROPIC_TOOL",
                        format!("{other:?} is not one of computer_20251124, computer_20250124"),
                    ))
                }
            },
            anthropic_model: s.text("FLOTILLA_ANTHROPIC_MODEL", "claude-sonnet-4-6").trim().to_owned(),
            model_screen: parse_screen(s.text("FLOTILLA_MODEL_SCREEN", "1024x768"))?,
            anthropic_api_key: s.get("ANTHROPIC_API_KEY").map(Secret::new),
            anthropic_base_url: s.url("ANTHROPIC_BASE_URL")?.unwrap_or_else(|| "https://api.anthropic.com".into()),
            gateway_addr: s.parsed("FLOTILLA_GATEWAY_ADDR", "127.0.0.1:0", "a socket address like 127.0.0.1:0")?,
            gateway_url: s.url("FLOTILLA_GATEWAY_URL")?,
            e2b_api_key: s.get("E2B_API_KEY").map(Secret::new),
            e2b_domain: s.text("E2B_DOMAIN", "e2b.app").to_owned(),
            otlp_endpoint: s.url("OTEL_EXPORTER_OTLP_ENDPOINT")?,
            live_view: LiveViewConfig::from_settings(s)?,
            streams: StreamsConfig::from_settings(s)?,
            tenants: TenantsConfig::default(),
        })
    }

    /// The API refuses to start without at least one key.
    pub fn require_api_keys(&self) -> Result<(), ConfigError> {
        if self.api_keys.is_empty() {
            return Err(ConfigError::new("FLOTILLA_API_KEYS", "is required: key=tenant[,key2=tenant2]"));
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

/// The file's flat settings by variable name, and its `tenants` table.
fn read_toml_file(path: &Path) -> Result<(HashMap<String, String>, Option<toml::Value>), ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ConfigError::new("FLOTILLA_CONFIG", format!("cannot read {}: {e}", path.display())))?;
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| ConfigError::new("FLOTILLA_CONFIG", format!("{}: {}", path.display(), e.message())))?;
    let mut settings = HashMap::new();
    let mut tenants = None;
    for (key, value) in table {
        if key == "tenants" {
            tenants = Some(value);
            continue;
        }
        let Some((var, _)) = KNOWN_VARS.iter().find(|(_, k)| *k == key) else {
            return Err(ConfigError::new("FLOTILLA_CONFIG", format!("{}: unknown setting {key:?}", path.display())));
        };
        let text = match value {
            toml::Value::String(s) => s,
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            other => {
                return Err(ConfigError::new(
                    "FLOTILLA_CONFIG",
                    format!("{}: {key} must be a string or number, not {}", path.display(), other.type_str()),
                ))
            }
        };
        settings.insert((*var).to_owned(), text);
    }
    Ok((settings, tenants))
}

fn parse_screen(raw: &str) -> Result<(u32, u32), ConfigError> {
    let size = raw.trim().split_once('x').and_then(|(w, h)| Some((w.parse::<u32>().ok()?, h.parse::<u32>().ok()?)));
    match size {
        Some((w, h)) if (64..=8192).contains(&w) && (64..=8192).contains(&h) => Ok((w, h)),
        _ => Err(ConfigError::new("FLOTILLA_MODEL_SCREEN", format!("{raw:?} is not a size like 1024x768 (64 to 8192 each way)"))),
    }
}

fn parse_sandbox_provider(value: Option<&str>) -> Result<Option<SandboxProviderKind>, ConfigError> {
    match value.map(str::trim) {
        None | Some("none") => Ok(None),
        Some("local") => Ok(Some(SandboxProviderKind::Local)),
        Some("e2b") => Ok(Some(SandboxProviderKind::E2b)),
        Some(other) => Err(ConfigError::new("FLOTILLA_SANDBOX_PROVIDER", format!("{other:?} is not one of local, e2b, none"))),
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

fn parse_api_keys(raw: &str) -> Result<Vec<(Secret, TenantId)>, ConfigError> {
    let mut keys = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, tenant)) = pair.split_once('=') else {
            return Err(ConfigError::new("FLOTILLA_API_KEYS", "each entry must be key=tenant"));
        };
        let key = key.trim();
        if key.len() < 8 {
            return Err(ConfigError::new("FLOTILLA_API_KEYS", "a key must be at least 8 characters"));
        }
        let tenant = TenantId::parse(tenant.trim()).map_err(|e| ConfigError::new("FLOTILLA_API_KEYS", e.to_string()))?;
        keys.push((Secret::new(key), tenant));
    }
    Ok(keys)
}

fn parse_worker_id(raw: Option<&str>) -> Result<String, ConfigError> {
    match raw {
        Some(id) if id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) => {
            Ok(id.to_owned())
        }
        Some(_) => Err(ConfigError::new("FLOTILLA_WORKER_ID", "must be at most 64 of A-Z a-z 0-9 - _ .")),
        None => Ok(format!("w-{}-{}", std::process::id(), &ulid::Ulid::new().to_string()[20..]).to_lowercase()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_env(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn defaults_need_no_environment() {
        let config = load(&[]).expect("defaults load");
        assert_eq!(config.redis, RedisTarget::Single("redis://127.0.0.1:6379".into()));
        assert_eq!(config.key_prefix, "flotilla");
        assert_eq!(config.retention, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(config.body_limit, 1024 * 1024);
        assert_eq!(config.batch_body_limit, 64 * 1024 * 1024);
    }

    #[test]
    fn api_keys_map_keys_to_tenants() {
        let config = load(&[("FLOTILLA_API_KEYS", "secret-one=acme, secret-two=globex")]).expect("loads");
        let tenants: Vec<&str> = config.api_keys.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(tenants, ["acme", "globex"]);
        assert_eq!(config.api_keys[0].0.expose(), "secret-one");
        assert!(!format!("{config:?}").contains("secret-one"), "keys never print");
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
        assert_eq!(config.sandbox_provider, None);
        let config = load(&[("FLOTILLA_SANDBOX_PROVIDER", "local"), ("FLOTILLA_SANDBOX_WARM", "2")]).expect("loads");
        assert_eq!(config.sandbox_provider, Some(SandboxProviderKind::Local));
        assert_eq!(config.sandbox_warm, 2);
    }

    #[test]
    fn the_fleet_cap_is_off_unless_set_and_must_be_positive() {
        assert_eq!(load(&[]).expect("defaults load").sandbox_fleet_max, None);
        let config = load(&[("FLOTILLA_SANDBOX_FLEET_MAX", "20")]).expect("loads");
        assert_eq!(config.sandbox_fleet_max, Some(20));
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
        assert_eq!(config.worker_concurrency, 9);
        assert_eq!(config.key_prefix, "fromenv");
        std::fs::write(dir.join("bad.toml"), "colour = \"red\"\n").expect("write");
        let bad = dir.join("bad.toml").to_string_lossy().to_string();
        let err = load(&[("FLOTILLA_CONFIG", &bad)]).expect_err("refused");
        assert!(err.problem.contains("unknown setting \"colour\""), "{err}");
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
    fn heartbeat_must_beat_within_the_lease() {
        let err = load(&[("FLOTILLA_LEASE_MS", "1000"), ("FLOTILLA_HEARTBEAT_MS", "2000")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_HEARTBEAT_MS");
    }
}
