//! Plain text requests to the Responses API: one `POST /responses` with the
//! instructions and a user message, no tools and no `previous_response_id`,
//! read like any other answer (its message texts are the completion).

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::response::read_answer;
use super::{bearer_headers, OpenAiConfig, OpenAiTool, RESPONSES_PATH};
use crate::model::http::ModelHttp;
use crate::model::{Completion, ModelError, TextModel};

/// The model name prefix of the preview computer-use models, which answer
/// only through their tool.
const PREVIEW_MODEL: &str = "computer-use-preview";

/// Text requests to one OpenAI model.
#[derive(Debug)]
pub struct OpenAiText {
    http: ModelHttp,
    headers: HeaderMap,
    model: String,
}

impl OpenAiText {
    /// A client for `config`'s model, or, when that is a preview
    /// computer-use model, for the GA tool's default model.
    pub fn new(config: &OpenAiConfig) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = bearer_headers(&http)?;
        Ok(Self { http, headers, model: text_model(&config.model).to_owned() })
    }

    fn request_body(&self, instructions: &str, prompt: &str) -> Value {
        json!({
            "model": self.model,
            "instructions": instructions,
            "input": [{ "role": "user", "content": [{ "type": "input_text", "text": prompt }] }],
        })
    }
}

impl TextModel for OpenAiText {
    fn complete<'a>(&'a self, instructions: &'a str, prompt: &'a str) -> BoxFuture<'a, Result<Completion, ModelError>> {
        Box::pin(async move {
            let body = self.request_body(instructions, prompt);
            let answer = read_answer(&self.http.post_json(RESPONSES_PATH, &self.headers, &body).await?)?;
            let text = answer.turn.text.ok_or_else(|| ModelError::Malformed("the answer holds no message text".into()))?;
            Ok(Completion { text, usage: answer.turn.usage })
        })
    }
}

/// The model that takes plain text requests in place of `model`.
fn text_model(model: &str) -> &str {
    if model.starts_with(PREVIEW_MODEL) {
        OpenAiTool::Ga.default_model()
    } else {
        model
    }
}

#[cfg(test)]
mod tests {
    use flotilla_config::Secret;

    use super::*;
    use crate::model::http::Endpoint;

    #[test]
    fn a_text_request_has_no_tools_and_avoids_the_preview_model() {
        let endpoint = Endpoint::new("http://127.0.0.1:1/v1", Secret::new("sk-test"));
        let text = OpenAiText::new(&OpenAiConfig::new(endpoint, OpenAiTool::Preview)).expect("client");
        let body = text.request_body("Plan.", "open a file");
        assert_eq!(body["model"], OpenAiTool::Ga.default_model());
        assert_eq!(body["instructions"], "Plan.");
        assert_eq!(body["input"][0]["content"][0]["text"], "open a file");
        assert!(body.get("tools").is_none());
        assert_eq!(text_model("gpt-5.4"), "gpt-5.4");
    }
}
