//! The model providers the computer-use pipelines talk to, as one generic
//! [`ModelFactory`]: a [`Provider`] says how to read its settings from the
//! worker's configuration and open conversations and planner clients;
//! [`Models`] adds what every provider shares (the task's own model
//! overriding the worker's, a missing key ending the task with a clear
//! message).
//!
//! Claude's models choose their computer tool per model, unless
//! `FLOTILLA_ANTHROPIC_TOOL` forces one; the tools models stepped down to
//! are remembered by one [`ToolMemory`] shared by every task of the worker.

use flotilla_config::Config;
use flotilla_config::{AnthropicToolVersion, OpenAiToolVersion};
use flotilla_types::task::StopCode;

use super::computer_use::ModelFactory;
use super::error::PipelineError;
use super::TaskRun;
use crate::model::anthropic::{AnthropicComputerUse, AnthropicConfig, AnthropicText, ComputerTool, ToolMemory};
use crate::model::gemini::{GeminiComputerUse, GeminiConfig, GeminiText, GRID};
use crate::model::history::ImageHistory;
use crate::model::http::Endpoint;
use crate::model::openai::{OpenAiConfig, OpenAiCua, OpenAiText, OpenAiTool};
use crate::model::{ComputerModel, ModelError, TextModel};

/// One model provider.
pub trait Provider: Send + Sync + 'static {
    /// Everything a conversation needs, the same for every task.
    type Settings: Clone + Send + Sync + 'static;
    /// The provider's name, for metric labels.
    const NAME: &'static str;
    /// The variable whose absence leaves the provider off.
    const KEY_VAR: &'static str;

    /// The worker's settings, or `None` without a key.
    fn settings(config: &Config) -> Option<Self::Settings>;
    /// Points the settings at another model.
    fn set_model(settings: &mut Self::Settings, model: &str);
    /// The model the settings point at.
    fn model_name(settings: &Self::Settings) -> &str;
    /// A conversation about a screen of `display` size.
    fn conversation(settings: Self::Settings, display: (u32, u32)) -> Result<Box<dyn ComputerModel>, ModelError>;
    /// A client for plain text requests.
    fn text(settings: &Self::Settings) -> Result<Box<dyn TextModel>, ModelError>;
    /// The normalized grid the model answers on, if it does.
    fn grid() -> Option<(u32, u32)> {
        None
    }
    /// Points the settings at the provider's browser tools (the `browser`
    /// pipeline's).
    fn for_browser(settings: &mut Self::Settings);
}

/// A provider's models as a worker's configuration sets them up.
pub struct Models<P: Provider> {
    settings: Option<P::Settings>,
    /// Whether conversations get the provider's browser tools.
    browser: bool,
}

impl<P: Provider> Models<P> {
    pub fn from_config(config: &Config) -> Self {
        Self { settings: P::settings(config), browser: false }
    }

    /// The provider's models with its browser tools, for the `browser` pipeline.
    pub fn browser_from_config(config: &Config) -> Self {
        Self { settings: P::settings(config), browser: true }
    }

    /// The worker's settings with the task's own model, if it names one.
    fn settings_for(&self, run: &TaskRun) -> Result<P::Settings, PipelineError> {
        let mut settings = self.settings.clone().ok_or_else(|| PipelineError::Fatal {
            code: StopCode::Problem,
            message: format!("this worker has no {}, so it cannot run this pipeline", P::KEY_VAR),
        })?;
        if let Some(model) = &run.task.spec().model {
            P::set_model(&mut settings, model);
        }
        if self.browser {
            P::for_browser(&mut settings);
        }
        Ok(settings)
    }
}

impl<P: Provider> ModelFactory for Models<P> {
    fn provider(&self) -> &'static str {
        P::NAME
    }

    fn open(&self, run: &TaskRun, display: (u32, u32)) -> Result<Box<dyn ComputerModel>, PipelineError> {
        P::conversation(self.settings_for(run)?, display).map_err(PipelineError::from)
    }

    fn planner(&self, run: &TaskRun) -> Result<Box<dyn TextModel>, PipelineError> {
        P::text(&self.settings_for(run)?).map_err(PipelineError::from)
    }

    fn grid(&self) -> Option<(u32, u32)> {
        P::grid()
    }

    fn model(&self, run: &TaskRun) -> String {
        self.settings_for(run).map(|s| P::model_name(&s).to_owned()).unwrap_or_default()
    }
}

/// OpenAI's Responses API (`openai-cua`).
pub struct OpenAi;

impl Provider for OpenAi {
    type Settings = OpenAiConfig;
    const NAME: &'static str = "openai";
    const KEY_VAR: &'static str = "OPENAI_API_KEY";

    fn settings(config: &Config) -> Option<OpenAiConfig> {
        let key = config.model.openai_api_key.clone()?;
        let tool = match config.model.openai_tool {
            OpenAiToolVersion::Ga => OpenAiTool::Ga,
            OpenAiToolVersion::Preview => OpenAiTool::Preview,
        };
        let mut openai = OpenAiConfig::new(Endpoint::new(&config.model.openai_base_url, key), tool);
        if let Some(model) = &config.model.openai_model {
            openai.model.clone_from(model);
        }
        Some(openai)
    }

    fn set_model(settings: &mut OpenAiConfig, model: &str) {
        model.clone_into(&mut settings.model);
    }

    fn model_name(settings: &OpenAiConfig) -> &str {
        &settings.model
    }

    fn conversation(settings: OpenAiConfig, display: (u32, u32)) -> Result<Box<dyn ComputerModel>, ModelError> {
        Ok(Box::new(OpenAiCua::new(settings, display, None)?))
    }

    fn text(settings: &OpenAiConfig) -> Result<Box<dyn TextModel>, ModelError> {
        Ok(Box::new(OpenAiText::new(settings)?))
    }

    fn for_browser(settings: &mut OpenAiConfig) {
        settings.browser = true;
    }
}

/// Anthropic's Messages API (`claude-computer-use`).
pub struct Anthropic;

/// Claude's settings: the client's, and the tool an operator forces.
#[derive(Debug, Clone)]
pub struct AnthropicSettings {
    config: AnthropicConfig,
    forced: Option<ComputerTool>,
}

impl Provider for Anthropic {
    type Settings = AnthropicSettings;
    const NAME: &'static str = "anthropic";
    const KEY_VAR: &'static str = "ANTHROPIC_API_KEY";

    fn settings(config: &Config) -> Option<AnthropicSettings> {
        let key = config.model.anthropic_api_key.clone()?;
        let forced = config.computer_use.anthropic_tool.map(|tool| match tool {
            AnthropicToolVersion::V20250124 => ComputerTool::V20250124,
            AnthropicToolVersion::V20251124 => ComputerTool::V20251124,
            AnthropicToolVersion::Toolset20260801 => ComputerTool::Toolset20260801,
        });
        let model = &config.model.anthropic_model;
        let tool = forced.unwrap_or_else(|| ComputerTool::for_model(model));
        let mut anthropic = AnthropicConfig::new(Endpoint::new(&config.model.anthropic_base_url, key), model, tool);
        anthropic.memory = ToolMemory::default();
        let images = config.computer_use.claude_images;
        anthropic.history = Some(ImageHistory::new(images.keep, images.chunk));
        Some(AnthropicSettings { config: anthropic, forced })
    }

    fn model_name(settings: &AnthropicSettings) -> &str {
        &settings.config.model
    }

    fn set_model(settings: &mut AnthropicSettings, model: &str) {
        model.clone_into(&mut settings.config.model);
        settings.config.tool = settings.forced.unwrap_or_else(|| ComputerTool::for_model(model));
    }

    fn conversation(settings: AnthropicSettings, display: (u32, u32)) -> Result<Box<dyn ComputerModel>, ModelError> {
        Ok(Box::new(AnthropicComputerUse::new(settings.config, display, None)?))
    }

    fn text(settings: &AnthropicSettings) -> Result<Box<dyn TextModel>, ModelError> {
        Ok(Box::new(AnthropicText::new(&settings.config)?))
    }

    /// The browser toolset, whatever the computer tool the model would get.
    fn for_browser(settings: &mut AnthropicSettings) {
        settings.config.tool = ComputerTool::BrowserToolset20260801;
        settings.config.memory = ToolMemory::default();
    }
}

/// The Gemini API (`gemini-computer-use`).
pub struct Gemini;

impl Provider for Gemini {
    type Settings = GeminiConfig;
    const NAME: &'static str = "gemini";
    const KEY_VAR: &'static str = "GEMINI_API_KEY";

    fn settings(config: &Config) -> Option<GeminiConfig> {
        let section = &config.computer_use;
        let key = section.gemini_api_key.clone()?;
        let mut gemini = GeminiConfig::new(Endpoint::new(&section.gemini_base_url, key), section.gemini_model.clone());
        gemini.history = ImageHistory::new(section.gemini_images.keep, section.gemini_images.chunk);
        Some(gemini)
    }

    fn set_model(settings: &mut GeminiConfig, model: &str) {
        model.clone_into(&mut settings.model);
    }

    fn model_name(settings: &GeminiConfig) -> &str {
        &settings.model
    }

    fn conversation(settings: GeminiConfig, _display: (u32, u32)) -> Result<Box<dyn ComputerModel>, ModelError> {
        Ok(Box::new(GeminiComputerUse::new(settings, None)?))
    }

    fn text(settings: &GeminiConfig) -> Result<Box<dyn TextModel>, ModelError> {
        Ok(Box::new(GeminiText::new(settings)?))
    }

    fn grid() -> Option<(u32, u32)> {
        Some(GRID)
    }

    fn for_browser(settings: &mut GeminiConfig) {
        settings.browser = true;
    }
}

pub type OpenAiModels = Models<OpenAi>;
pub type AnthropicModels = Models<Anthropic>;
pub type GeminiModels = Models<Gemini>;
