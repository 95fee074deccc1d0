//! Plain text requests to the Messages API: one `POST /v1/messages` with a
//! system prompt and one user message, without tools (so without the
//! computer tool's beta header). The answer's text blocks, joined, are the
//! completion; an answer cut off or refused is malformed, saying which.

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::{malformed, parse_usage, version_headers, AnthropicConfig, MESSAGES_PATH};
use crate::model::http::ModelHttp;
use crate::model::{Completion, ModelError, TextModel};

/// Text requests to one Claude model.
pub struct AnthropicText {
    http: ModelHttp,
    headers: HeaderMap,
    model: String,
    max_tokens: u32,
}

impl AnthropicText {
    /// A client for `config`'s model and answer length.
    pub fn new(config: &AnthropicConfig) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = version_headers(&http)?;
        Ok(Self { http, headers, model: config.model.clone(), max_tokens: config.max_tokens })
    }

    fn request_body(&self, instructions: &str, prompt: &str) -> Value {
        json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": instructions,
            "messages": [{ "role": "user", "content": prompt }],
        })
    }
}

impl TextModel for AnthropicText {
    fn complete<'a>(&'a self, instructions: &'a str, prompt: &'a str) -> BoxFuture<'a, Result<Completion, ModelError>> {
        Box::pin(async move {
            let answer = self.http.post_json(MESSAGES_PATH, &self.headers, &self.request_body(instructions, prompt)).await?;
            let text = answer_text(&answer)?;
            Ok(Completion { text, usage: parse_usage(&answer) })
        })
    }
}

/// The text blocks of a finished answer, joined.
fn answer_text(answer: &Value) -> Result<String, ModelError> {
    let content = answer.get("content").and_then(Value::as_array).ok_or_else(|| malformed("content must be an array"))?;
    let texts: Vec<&str> = content.iter().filter(|b| b["type"] == "text").filter_map(|b| b["text"].as_str()).collect();
    match answer.get("stop_reason").and_then(Value::as_str) {
        Some("end_turn" | "stop_sequence") => {}
        Some("max_tokens") => return Err(malformed("stop_reason is max_tokens: the answer was cut off; raise max_tokens")),
        Some("refusal") => {
            return Err(malformed(format!("stop_reason is refusal: the model declined to answer: {}", texts.join(" "))))
        }
        Some(other) => return Err(malformed(format!("stop_reason {other:?} does not end a text answer"))),
        None => return Err(malformed("stop_reason must be a string")),
    }
    if texts.is_empty() {
        return Err(malformed("content has no text block"));
    }
    Ok(texts.join("\n"))
}

#[cfg(test)]
mod tests {
    use flotilla_config::Secret;

    use super::*;
    use crate::model::anthropic::ComputerTool;
    use crate::model::http::Endpoint;

    #[test]
    fn a_text_request_has_a_system_prompt_and_no_tools() {
        let config =
            AnthropicConfig::new(Endpoint::new("http://127.0.0.1:1", Secret::new("k")), "claude-x", ComputerTool::V20251124);
        let text = AnthropicText::new(&config).expect("client");
        let body = text.request_body("Plan.", "open a file");
        assert_eq!(body["system"], "Plan.");
        assert_eq!(body["messages"], json!([{"role": "user", "content": "open a file"}]));
        assert!(body.get("tools").is_none());
        assert!(text.headers.get("anthropic-beta").is_none());
        assert_eq!(text.headers.get("anthropic-version").and_then(|v| v.to_str().ok()), Some("2023-06-01"));
    }

    #[test]
    fn answers_join_their_text_or_say_why_they_cannot_be_used() {
        let done = json!({"content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "stop_reason": "end_turn"});
        assert_eq!(answer_text(&done).expect("text"), "a\nb");
        let cut = json!({"content": [{"type": "text", "text": "{\"steps\": ["}], "stop_reason": "max_tokens"});
        assert!(matches!(answer_text(&cut), Err(ModelError::Malformed(m)) if m.contains("cut off")));
        let empty = json!({"content": [], "stop_reason": "end_turn"});
        assert!(matches!(answer_text(&empty), Err(ModelError::Malformed(m)) if m.contains("no text")));
    }
}
