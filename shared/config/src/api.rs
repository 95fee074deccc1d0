//! The API's section: where it listens (its keys are in `auth.rs`), how
//! large a request body may be, and the pipeline a task gets when
//! its spec names none (decided once, when the task is accepted).

use std::net::SocketAddr;

use super::{ConfigError, Settings};
use flotilla_types::task::Pipeline;

/// The settings only the API reads.
#[derive(Debug, Clone)]
pub struct ApiConfig {
    /// `FLOTILLA_API_ADDR`.
    pub addr: SocketAddr,
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
            body_limit: s.positive("FLOTILLA_BODY_LIMIT", 1024 * 1024)?,
            batch_body_limit: s.positive("FLOTILLA_BATCH_BODY_LIMIT", 8 * 1024 * 1024)?,
            default_pipeline: s.parsed(
                "FLOTILLA_DEFAULT_PIPELINE",
                "scripted",
                "one of openai-cua, claude-computer-use, gemini-computer-use, claude-code, scripted, browser",
            )?,
        })
    }
}
