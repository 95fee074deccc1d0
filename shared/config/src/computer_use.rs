//! Settings of the computer-use model pipelines that go beyond a key and a
//! URL per provider: which Claude computer tool to force, Gemini's, and
//! how many screenshots the Claude and Gemini histories keep and drop at a
//! time (see `worker::model::history`).

use super::{ConfigError, Secret, Settings};

/// A Claude computer tool version an operator can force with
/// `FLOTILLA_ANTHROPIC_TOOL` (unset: chosen per model).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnthropicToolVersion {
    /// `computer_20250124` (beta `computer-use-2025-01-24`).
    V20250124,
    /// `computer_20251124` (beta `computer-use-2025-11-24`).
    V20251124,
    /// `computer_toolset_20260801` (GA, no beta header).
    Toolset20260801,
}

/// Google's recommended computer-use model when a task names none.
pub const DEFAULT_GEMINI_MODEL: &str = "gemini-3.6-flash";

/// Which screenshots a conversation's history keeps: the newest `keep`,
/// older ones dropped `chunk` at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHistorySetting {
    pub keep: usize,
    pub chunk: usize,
}

/// Claude's history (the tools before the toolset, whose history is
/// append-only) by default: `FLOTILLA_CLAUDE_KEEP_IMAGES`,
/// `FLOTILLA_CLAUDE_DROP_IMAGES_BY`; measured by `flotilla-cost-bench`.
pub const DEFAULT_CLAUDE_IMAGES: ImageHistorySetting = ImageHistorySetting { keep: 3, chunk: 10 };
/// Gemini's history by default: `FLOTILLA_GEMINI_KEEP_IMAGES`,
/// `FLOTILLA_GEMINI_DROP_IMAGES_BY`; measured by `flotilla-cost-bench`.
pub const DEFAULT_GEMINI_IMAGES: ImageHistorySetting = ImageHistorySetting { keep: 3, chunk: 10 };

/// The computer-use models' section of the configuration.
#[derive(Debug, Clone)]
pub struct ComputerUseConfig {
    /// The Claude tool every model gets; `None`: each model's own (the
    /// pipeline's table), stepping down when an endpoint refuses it.
    pub anthropic_tool: Option<AnthropicToolVersion>,
    pub gemini_api_key: Option<Secret>,
    /// The Gemini API's base URL, without the version path.
    pub gemini_base_url: String,
    /// The model for `gemini-computer-use` tasks that name none.
    pub gemini_model: String,
    /// The screenshots Claude's history keeps.
    pub claude_images: ImageHistorySetting,
    /// The screenshots Gemini's history keeps.
    pub gemini_images: ImageHistorySetting,
}

impl ComputerUseConfig {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        Ok(Self {
            anthropic_tool: anthropic_tool(s.get("FLOTILLA_ANTHROPIC_TOOL"))?,
            gemini_api_key: s.get("GEMINI_API_KEY").map(Secret::new),
            gemini_base_url: s.url("GEMINI_BASE_URL")?.unwrap_or_else(|| "https://generativelanguage.googleapis.com".into()),
            gemini_model: s.text("FLOTILLA_GEMINI_MODEL", DEFAULT_GEMINI_MODEL).trim().to_owned(),
            claude_images: ImageHistorySetting {
                keep: s.positive("FLOTILLA_CLAUDE_KEEP_IMAGES", DEFAULT_CLAUDE_IMAGES.keep)?,
                chunk: s.positive("FLOTILLA_CLAUDE_DROP_IMAGES_BY", DEFAULT_CLAUDE_IMAGES.chunk)?,
            },
            gemini_images: ImageHistorySetting {
                keep: s.positive("FLOTILLA_GEMINI_KEEP_IMAGES", DEFAULT_GEMINI_IMAGES.keep)?,
                chunk: s.positive("FLOTILLA_GEMINI_DROP_IMAGES_BY", DEFAULT_GEMINI_IMAGES.chunk)?,
            },
        })
    }
}

fn anthropic_tool(value: Option<&str>) -> Result<Option<AnthropicToolVersion>, ConfigError> {
    Ok(match value.map(str::trim) {
        None | Some("" | "auto") => None,
        Some("computer_toolset_20260801") => Some(AnthropicToolVersion::Toolset20260801),
        Some("computer_20251124") => Some(AnthropicToolVersion::V20251124),
        Some("computer_20250124") => Some(AnthropicToolVersion::V20250124),
        Some(other) => {
            return Err(ConfigError::new(
                "FLOTILLA_ANTHROPIC_TOOL",
                format!("{other:?} is not one of auto, computer_toolset_20260801, computer_20251124, computer_20250124"),
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_claude_tool_is_per_model_unless_forced() {
        assert_eq!(anthropic_tool(None), Ok(None));
        assert_eq!(anthropic_tool(Some("auto")), Ok(None));
        assert_eq!(anthropic_tool(Some("computer_toolset_20260801")), Ok(Some(AnthropicToolVersion::Toolset20260801)));
        assert_eq!(anthropic_tool(Some(" computer_20250124 ")), Ok(Some(AnthropicToolVersion::V20250124)));
        assert_eq!(anthropic_tool(Some("computer_2099")).map_err(|e| e.var), Err("FLOTILLA_ANTHROPIC_TOOL".to_owned()));
    }
}
