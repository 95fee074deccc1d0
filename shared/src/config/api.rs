//! The API's section: where it listens, which keys it accepts for which
//! tenant, how large a request body may be, and the pipeline a task gets when
//! its spec names none (decided once, when the task is accepted).

use std::net::SocketAddr;

use super::{ConfigError, Secret, Settings};
use crate::ids::TenantId;
use crate::task::Pipeline;

/// The settings only the API reads.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `FLOTILLA_API_ADDR`.
    pub addr: SocketAddr,
    /// `FLOTILLA_API_KEYS`: API key → tenant.
    pub keys: Vec<(Secret, TenantId)>,
    /// `FLOTILLA_BODY_LIMIT`.
    pub body_limit: usize,
    /// `FLOTILLA_BATCH_BODY_LIMIT`: the largest body of `POST /v1/batches`,
    /// which carries many specs.
    pub batch_body_limit: usize,
    /// `FLOTILLA_DEFAULT_PIPELINE`: the pipeline of a task whose spec names none.
    pub default_pipeline: Pipeline,
}

impl ApiConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            addr: s.parsed("FLOTILLA_API_ADDR", "127.0.0.1:8080", "a socket address like 127.0.0.1:8080")?,
            keys: parse_api_keys(s.text("FLOTILLA_API_KEYS", ""))?,
            body_limit: s.positive("FLOTILLA_BODY_LIMIT", 1024 * 1024)?,
            batch_body_limit: s.positive("FLOTILLA_BATCH_BODY_LIMIT", 64 * 1024 * 1024)?,
            default_pipeline: s.parsed(
                "FLOTILLA_DEFAULT_PIPELINE",
                "scripted",
                "one of openai-cua, claude-computer-use, gemini-computer-use, claude-code, scripted",
            )?,
        })
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
