//! Which computer tool a Claude model gets, and stepping down when an
//! endpoint says the model does not take it.
//!
//! The choice comes from the model's name ([`ComputerTool::for_model`]), an
//! operator's override, or what this process learnt earlier: a `400` whose
//! message says the model `does not support tool types:` and names the type
//! sent makes the client step down to the best type the message lists as
//! accepted (or, with no list, the next older one), and the [`ToolMemory`]
//! keeps that per model for the life of the process, so later tasks on the
//! model start there. No other error ever steps down.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The version of the computer tool, which fixes its `type`, its beta
/// header (none for the toolset) and the actions it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComputerTool {
    /// `computer_20250124`: Sonnet 4.5, Haiku 4.5, Opus 4.1, Sonnet 4, Opus 4.
    V20250124,
    /// `computer_20251124`: adds `zoom`. Opus 4.5 to 4.7, Sonnet 4.6.
    V20251124,
    /// `computer_toolset_20260801` (GA, no beta header): one member tool per
    /// action, several calls per turn. Opus 4.8 and later, the 5 family.
    Toolset20260801,
    /// `browser_toolset_20260801` (GA, no beta header): the same member
    /// protocol for a browser tab (`toolset_name` `browser`); only the
    /// `browser` pipeline offers it, and it never steps down.
    BrowserToolset20260801,
}

impl ComputerTool {
    /// Every version, newest first: the order of stepping down.
    pub const NEWEST_FIRST: [ComputerTool; 3] = [Self::Toolset20260801, Self::V20251124, Self::V20250124];

    /// The tool's `type` in the request.
    pub fn tool_type(self) -> &'static str {
        match self {
            Self::V20250124 => "computer_20250124",
            Self::V20251124 => "computer_20251124",
            Self::Toolset20260801 => "computer_toolset_20260801",
            Self::BrowserToolset20260801 => "browser_toolset_20260801",
        }
    }

    /// The version whose `type` is `name`.
    pub fn from_type(name: &str) -> Option<Self> {
        Self::NEWEST_FIRST.into_iter().find(|tool| tool.tool_type() == name)
    }

    /// The `anthropic-beta` header value this version needs, if any.
    pub fn beta(self) -> Option<&'static str> {
        match self {
            Self::V20250124 => Some("computer-use-2025-01-24"),
            Self::V20251124 => Some("computer-use-2025-11-24"),
            Self::Toolset20260801 | Self::BrowserToolset20260801 => None,
        }
    }

    /// Whether the model may ask to `zoom`.
    pub fn zooms(self) -> bool {
        !matches!(self, Self::V20250124)
    }

    /// Whether this is the member-tool toolset (append-only history,
    /// adaptive thinking, batches).
    pub fn is_toolset(self) -> bool {
        matches!(self, Self::Toolset20260801 | Self::BrowserToolset20260801)
    }

    /// Whether this is the browser toolset.
    pub fn is_browser(self) -> bool {
        matches!(self, Self::BrowserToolset20260801)
    }

    /// The tool a model takes on the Claude API, by its name: the toolset
    /// for Claude 5 (Fable, Mythos, Opus, Sonnet, Haiku 5.5) and Opus 4.8;
    /// `computer_20251124` for Opus 4.5 to 4.7 and Sonnet 4.6;
    /// `computer_20250124` for older ones. A name this table does not know
    /// gets the newest, and steps down if the endpoint refuses it.
    pub fn for_model(model: &str) -> Self {
        let Some((family, version)) = family_and_version(model) else {
            return Self::Toolset20260801;
        };
        match family {
            "opus" if version >= (4, 8) => Self::Toolset20260801,
            "opus" if version >= (4, 5) => Self::V20251124,
            "sonnet" if version >= (5, 0) => Self::Toolset20260801,
            "sonnet" if version >= (4, 6) => Self::V20251124,
            "haiku" if version >= (5, 0) => Self::Toolset20260801,
            "opus" | "sonnet" | "haiku" => Self::V20250124,
            _ => Self::Toolset20260801,
        }
    }

    /// The version to try after the endpoint refused this one with
    /// `message`: the best accepted type it lists, else the next older
    /// version. `None` when the message is not about this tool's type, or
    /// nothing older is left.
    pub fn step_down(self, message: &str) -> Option<Self> {
        if self.is_browser() {
            return None;
        }
        let (_, refused) = message.split_once("does not support tool types")?;
        let named = |tool: ComputerTool| refused.contains(tool.tool_type());
        if !named(self) {
            return None;
        }
        let accepted =
            Self::NEWEST_FIRST.into_iter().filter(|tool| *tool != self && named(*tool)).find(|tool| tool.older_than(self));
        accepted.or_else(|| Self::NEWEST_FIRST.into_iter().find(|tool| tool.older_than(self)))
    }

    fn older_than(self, other: Self) -> bool {
        let rank = |tool: Self| Self::NEWEST_FIRST.iter().position(|t| *t == tool);
        rank(self) > rank(other)
    }
}

/// A model name's family and `(major, minor)` version: `claude-opus-5-5` is
/// `("opus", (5, 5))`, `claude-sonnet-4-20250514` is `("sonnet", (4, 0))`.
fn family_and_version(model: &str) -> Option<(&str, (u32, u32))> {
    let mut parts = model.strip_prefix("claude-").unwrap_or(model).split('-');
    let family = parts.next()?;
    let major = parts.next()?.parse().ok()?;
    let minor = match parts.next().map(str::parse::<u32>) {
        Some(Ok(minor)) if minor < 100 => minor,
        _ => 0,
    };
    Some((family, (major, minor)))
}

/// What this process learnt about models' tools: the version each model
/// stepped down to. Cheap to clone; clones share one table.
#[derive(Debug, Clone, Default)]
pub struct ToolMemory {
    learnt: Arc<Mutex<HashMap<String, ComputerTool>>>,
}

impl ToolMemory {
    /// The version `model` stepped down to earlier, if it did.
    pub fn get(&self, model: &str) -> Option<ComputerTool> {
        self.lock().get(model).copied()
    }

    /// Keeps `tool` for `model` from now on.
    pub fn remember(&self, model: &str, tool: ComputerTool) {
        self.lock().insert(model.to_owned(), tool);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, ComputerTool>> {
        self.learnt.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_models() {
        use ComputerTool::*;
        for (model, tool) in [
            ("claude-opus-5-5", Toolset20260801),
            ("claude-sonnet-5-5", Toolset20260801),
            ("claude-haiku-5-5", Toolset20260801),
            ("claude-fable-5-1", Toolset20260801),
            ("claude-mythos-5", Toolset20260801),
            ("claude-opus-4-8", Toolset20260801),
            ("claude-sonnet-5", Toolset20260801),
            ("claude-opus-4-7", V20251124),
            ("claude-opus-4-5-20251101", V20251124),
            ("claude-sonnet-4-6", V20251124),
            ("claude-sonnet-4-5-20250929", V20250124),
            ("claude-haiku-4-5-20251001", V20250124),
            ("claude-opus-4-1-20250805", V20250124),
            ("claude-sonnet-4-20250514", V20250124),
            ("claude-opus-4-20250514", V20250124),
            ("some-proxy-alias", Toolset20260801),
        ] {
            assert_eq!(ComputerTool::for_model(model), tool, "{model}");
        }
    }

    #[test]
    fn stepping_down_takes_the_best_accepted_type_and_only_for_the_type_sent() {
        use ComputerTool::*;
        let listed = "'claude-opus-4-7' does not support tool types: computer_toolset_20260801. Supported: computer_20251124, computer_20250124.";
        assert_eq!(Toolset20260801.step_down(listed), Some(V20251124));
        let only_old = "'x' does not support tool types: computer_toolset_20260801. Accepted tool types: computer_20250124";
        assert_eq!(Toolset20260801.step_down(only_old), Some(V20250124));
        let bare = "'claude-haiku-4-5' does not support tool types: computer_20251124.";
        assert_eq!(V20251124.step_down(bare), Some(V20250124));
        assert_eq!(Toolset20260801.step_down(bare), None, "the message names another type");
        assert_eq!(V20250124.step_down("'m' does not support tool types: computer_20250124."), None, "nothing older");
        assert_eq!(Toolset20260801.step_down("messages.0: computer_toolset_20260801 has a bad field"), None);
        assert_eq!(ComputerTool::from_type("computer_toolset_20260801"), Some(Toolset20260801));
    }

    #[test]
    fn memory_is_shared_by_clones() {
        let memory = ToolMemory::default();
        memory.clone().remember("m", ComputerTool::V20251124);
        assert_eq!(memory.get("m"), Some(ComputerTool::V20251124));
        assert_eq!(memory.get("n"), None);
    }
}
