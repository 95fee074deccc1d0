//! Carrying a Claude conversation over to another attempt: the Messages
//! API keeps nothing, so the checkpoint is the conversation itself — the
//! messages as sent and received (`history`, in the shape
//! [`ComputerModel::checkpoint`](crate::model::ComputerModel::checkpoint)
//! describes), the tool offered, the calls of the last answer still to be
//! answered and where the pointer was left. Its screenshots are still
//! image blocks here; the step journal swaps them for blob-store hashes.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{AnthropicComputerUse, ComputerTool, ModelError, Pending, BROWSER_TOOLSET, TOOLSET_NAME};

/// A pending call as the checkpoint keeps it.
#[derive(Serialize, Deserialize)]
struct SavedCall {
    id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    toolset: Option<String>,
    #[serde(default)]
    shows: bool,
}

impl AnthropicComputerUse {
    /// The checkpoint after the last turn; `None` before the first.
    pub(super) fn save(&self) -> Option<Value> {
        if !self.messages.iter().any(|m| m["role"] == "assistant") {
            return None;
        }
        let pending: Vec<SavedCall> = self
            .pending
            .iter()
            .map(|p| SavedCall { id: p.id.clone(), toolset: p.toolset.map(str::to_owned), shows: p.shows })
            .collect();
        Some(json!({
            "tool": self.tool.tool_type(),
            "history": self.messages,
            "pending": pending,
            "pointer": self.pointer,
        }))
    }

    /// Takes up the conversation `checkpoint` describes.
    pub(super) fn load(&mut self, checkpoint: &Value) -> Result<(), ModelError> {
        let bad = |what: &str| ModelError::Malformed(format!("the conversation checkpoint {what}"));
        let tool = checkpoint["tool"].as_str().and_then(ComputerTool::from_type).ok_or_else(|| bad("names no known tool"))?;
        let history = checkpoint["history"].as_array().filter(|h| !h.is_empty()).ok_or_else(|| bad("holds no messages"))?;
        let saved: Vec<SavedCall> =
            serde_json::from_value(checkpoint["pending"].clone()).map_err(|e| bad(&format!("has bad pending calls: {e}")))?;
        let pending = saved
            .into_iter()
            .map(|call| {
                let toolset = match call.toolset.as_deref() {
                    None => None,
                    Some(TOOLSET_NAME) => Some(TOOLSET_NAME),
                    Some(BROWSER_TOOLSET) => Some(BROWSER_TOOLSET),
                    Some(other) => return Err(bad(&format!("names an unknown toolset {other:?}"))),
                };
                Ok(Pending { id: call.id, toolset, shows: call.shows })
            })
            .collect::<Result<Vec<_>, _>>()?;
        self.pointer =
            serde_json::from_value(checkpoint["pointer"].clone()).map_err(|e| bad(&format!("has a bad pointer: {e}")))?;
        self.tool = tool;
        self.messages = history.clone();
        self.pending = pending;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::AnthropicConfig;
    use super::*;
    use crate::model::http::Endpoint;

    fn client() -> AnthropicComputerUse {
        let endpoint = Endpoint::new("http://127.0.0.1:1", flotilla_config::Secret::new("sk-test"));
        AnthropicComputerUse::new(AnthropicConfig::new(endpoint, "claude-sonnet-4-5", ComputerTool::V20250124), (1024, 768), None)
            .expect("a client")
    }

    #[test]
    fn a_checkpoint_carries_the_messages_pending_calls_and_pointer_to_another_client() {
        let mut first = client();
        assert_eq!(first.save(), None, "nothing to carry before the first answer");
        first.messages = vec![
            json!({"role": "user", "content": [{"type": "text", "text": "do it"}]}),
            json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "computer", "input": {}}]}),
        ];
        first.pending = vec![Pending { id: "t1".into(), toolset: Some(TOOLSET_NAME), shows: true }];
        first.pointer = Some([4, 5]);
        let checkpoint = first.save().expect("a checkpoint");
        let mut second = client();
        second.load(&checkpoint).expect("loads");
        assert_eq!(second.messages, first.messages);
        assert_eq!(second.pointer, Some([4, 5]));
        assert_eq!(
            (second.pending[0].id.as_str(), second.pending[0].toolset, second.pending[0].shows),
            ("t1", Some(TOOLSET_NAME), true)
        );
        assert!(second.load(&json!({"tool": "computer_20250124", "history": []})).is_err(), "an empty history is refused");
        assert!(second.load(&json!({"tool": "nope", "history": checkpoint["history"]})).is_err(), "an unknown tool is refused");
    }
}
