//! The `browser` pipeline: the computer-use step loop driving the Chromium
//! tab of the task's sandbox ([`Surface::Browser`](super::surface::Surface))
//! with a provider's browser tools, chosen by the task's `model`: a
//! `claude-…` model gets Claude's `browser_toolset_20260801`, a `gemini-…`
//! model Gemini computer use in `ENVIRONMENT_BROWSER`, any other OpenAI's
//! computer tool with a `navigate` function (the preview tool also says
//! `environment: "browser"`). A task without a `model` gets Claude's, at
//! the worker's configured model.

use flotilla_config::Config;
use futures::future::BoxFuture;

use super::computer_use::ComputerUse;
use super::providers::{AnthropicModels, GeminiModels, OpenAiModels};
use super::{Outcome, PipelineError, PipelineRunner, TaskRun};

/// The browser pipeline over the three providers.
pub struct Browser {
    anthropic: ComputerUse,
    gemini: ComputerUse,
    openai: ComputerUse,
}

/// Which provider a model name belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrowserProvider {
    Anthropic,
    Gemini,
    OpenAi,
}

impl BrowserProvider {
    /// The provider of `model`; Claude's when the task names none.
    pub fn of(model: Option<&str>) -> Self {
        match model {
            None => Self::Anthropic,
            Some(name) if name.starts_with("claude") => Self::Anthropic,
            Some(name) if name.starts_with("gemini") => Self::Gemini,
            Some(_) => Self::OpenAi,
        }
    }
}

impl Browser {
    pub fn from_config(config: &Config) -> Self {
        let screen = config.model.screen;
        Self {
            anthropic: ComputerUse::for_browser(AnthropicModels::browser_from_config(config), screen),
            gemini: ComputerUse::for_browser(GeminiModels::browser_from_config(config), screen),
            openai: ComputerUse::for_browser(OpenAiModels::browser_from_config(config), screen),
        }
    }
}

impl PipelineRunner for Browser {
    fn run<'a>(&'a self, run: &'a TaskRun) -> BoxFuture<'a, Result<Outcome, PipelineError>> {
        let pipeline = match BrowserProvider::of(run.task.spec().model.as_deref()) {
            BrowserProvider::Anthropic => &self.anthropic,
            BrowserProvider::Gemini => &self.gemini,
            BrowserProvider::OpenAi => &self.openai,
        };
        pipeline.run(run)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_name_picks_the_provider() {
        assert_eq!(BrowserProvider::of(Some("claude-opus-5-5")), BrowserProvider::Anthropic);
        assert_eq!(BrowserProvider::of(Some("gemini-3.5-pro")), BrowserProvider::Gemini);
        assert_eq!(BrowserProvider::of(Some("computer-use-preview")), BrowserProvider::OpenAi);
        assert_eq!(BrowserProvider::of(None), BrowserProvider::Anthropic);
    }
}
