//! Pipelines: what runs a task once a worker holds it. One trait, a registry
//! from the task's `pipeline` field to an implementation, and the outcomes a
//! pipeline can end with. A pipeline gets its task through a
//! [`TaskHandle`], which cannot end the task: the outcome it returns is
//! written by the executor.

mod browser;
mod budget;
mod claude_code;
pub mod computer_use;
pub mod error;
pub mod files;
pub mod handle;
pub(crate) mod held;
pub mod journal;
mod kept_watch;
mod open_app;
pub mod plan;
pub mod planner;
pub mod pricing;
pub mod profile;
pub mod providers;
mod replay;
pub mod scale;
mod scripted;
pub mod session;
#[cfg(test)]
mod settle_tests;
pub mod surface;

use std::collections::HashMap;
use std::sync::Arc;

use flotilla_types::task::Pipeline;
use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

pub use claude_code::ClaudeCode;
pub use computer_use::{ComputerUse, ModelFactory};
pub use error::PipelineError;
use flotilla_config::Config;
pub use handle::TaskHandle;
pub use providers::{AnthropicModels, GeminiModels, OpenAiModels};
pub use scripted::Scripted;
pub use session::{Limits, Session, Settled, Steps};

use crate::metrics::WorkerMetrics;
pub use crate::tools::Tools;

/// What a pipeline is given: its task's handle (spec, progress, reads; no
/// terminal writes), a token that is cancelled when the task must stop, one
/// cancelled when the worker stops, the
/// worker's tools, and the metrics its steps, model calls and sandbox
/// acquires are timed into.
pub struct TaskRun {
    pub task: Arc<dyn TaskHandle>,
    pub cancel: CancellationToken,
    pub tools: Arc<Tools>,
    pub metrics: WorkerMetrics,
    /// Cancelled when the worker stops: a pipeline that journals its steps
    /// stops at its next step boundary and returns
    /// [`PipelineError::HandedBack`]; others run on within the drain
    /// deadline.
    pub hand_back: CancellationToken,
}

/// How a pipeline ended well.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// The task is done; this is its result.
    Succeeded(serde_json::Value),
}

/// Runs tasks of one pipeline kind.
pub trait PipelineRunner: Send + Sync + 'static {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>>;
}

/// Pipeline implementations by the name tasks use.
#[derive(Clone, Default)]
pub struct Registry {
    pipelines: HashMap<Pipeline, Arc<dyn PipelineRunner>>,
}

impl Registry {
    /// The pipelines whose set-up lives in the worker's tools: `scripted` and
    /// `claude-code`.
    pub fn standard() -> Self {
        let mut registry = Self::default();
        registry.register(Pipeline::Scripted, Arc::new(Scripted));
        registry.register(Pipeline::ClaudeCode, Arc::new(ClaudeCode));
        registry
    }

    /// Every pipeline this build ships, set up from `config` (model keys,
    /// tool versions, the screen size models see).
    pub fn for_config(config: &Config) -> Self {
        let mut registry = Self::standard();
        let openai = ComputerUse::new(OpenAiModels::from_config(config), config.model.screen);
        let anthropic = ComputerUse::new(AnthropicModels::from_config(config), config.model.screen);
        let gemini = ComputerUse::new(GeminiModels::from_config(config), config.model.screen);
        registry.register(Pipeline::OpenaiCua, Arc::new(openai));
        registry.register(Pipeline::ClaudeComputerUse, Arc::new(anthropic));
        registry.register(Pipeline::GeminiComputerUse, Arc::new(gemini));
        registry.register(Pipeline::Browser, Arc::new(browser::Browser::from_config(config)));
        registry
    }

    /// Adds or replaces the implementation of one pipeline kind.
    pub fn register(&mut self, kind: Pipeline, pipeline: Arc<dyn PipelineRunner>) {
        self.pipelines.insert(kind, pipeline);
    }

    pub fn get(&self, kind: Pipeline) -> Option<Arc<dyn PipelineRunner>> {
        self.pipelines.get(&kind).cloned()
    }

    /// The pipeline kinds registered.
    pub fn kinds(&self) -> impl Iterator<Item = Pipeline> + '_ {
        self.pipelines.keys().copied()
    }
}
