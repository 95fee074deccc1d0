//! Carrying a Gemini conversation over to another attempt: `generateContent`
//! keeps nothing, so the checkpoint is the conversation itself — the
//! contents as sent and received (`history`, in the shape
//! [`ComputerModel::checkpoint`](crate::model::ComputerModel::checkpoint)
//! describes), the calls of the last answer still to be answered and the
//! number of answers so far (made-up call ids go on from it). Its
//! screenshots are still inline parts here; the step journal swaps them for
//! blob-store hashes.

use serde_json::{json, Value};

use super::{GeminiComputerUse, ModelError, Pending};

impl GeminiComputerUse {
    /// The checkpoint after the last turn; `None` before the first.
    pub(super) fn save(&self) -> Option<Value> {
        if self.turns == 0 {
            return None;
        }
        Some(json!({"history": self.contents, "pending": self.pending, "turns": self.turns}))
    }

    /// Takes up the conversation `checkpoint` describes.
    pub(super) fn load(&mut self, checkpoint: &Value) -> Result<(), ModelError> {
        let bad = |what: String| ModelError::Malformed(format!("the conversation checkpoint {what}"));
        let history =
            checkpoint["history"].as_array().filter(|h| !h.is_empty()).ok_or_else(|| bad("holds no contents".into()))?;
        let pending: Vec<Pending> =
            serde_json::from_value(checkpoint["pending"].clone()).map_err(|e| bad(format!("has bad pending calls: {e}")))?;
        let turns = checkpoint["turns"].as_u64().ok_or_else(|| bad("counts no turns".into()))?;
        self.contents = history.clone();
        self.pending = pending;
        self.turns = usize::try_from(turns).map_err(|e| bad(format!("counts too many turns: {e}")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use flotilla_config::Secret;

    use super::super::GeminiConfig;
    use super::*;
    use crate::model::http::Endpoint;

    fn client() -> GeminiComputerUse {
        let config = GeminiConfig::new(Endpoint::new("http://127.0.0.1:1", Secret::new("key")), "gemini-test");
        GeminiComputerUse::new(config, None).expect("a client")
    }

    #[test]
    fn a_checkpoint_carries_the_contents_pending_calls_and_turn_count_to_another_client() {
        let mut first = client();
        assert_eq!(first.save(), None, "nothing to carry before the first answer");
        first.contents = vec![
            json!({"role": "user", "parts": [{"text": "do it"}]}),
            json!({"role": "model", "parts": [{"functionCall": {"name": "click_at", "args": {"x": 1, "y": 2}}}]}),
        ];
        first.pending = vec![Pending { id: None, key: "gemini-1-0".into(), name: "click_at".into(), confirm: true }];
        first.turns = 1;
        let checkpoint = first.save().expect("a checkpoint");
        let mut second = client();
        second.load(&checkpoint).expect("loads");
        assert_eq!(second.contents, first.contents);
        assert_eq!(second.turns, 1);
        let call = &second.pending[0];
        assert_eq!(
            (call.id.as_deref(), call.key.as_str(), call.name.as_str(), call.confirm),
            (None, "gemini-1-0", "click_at", true)
        );
        assert!(second.load(&json!({"history": [], "pending": [], "turns": 1})).is_err(), "an empty history is refused");
    }
}
