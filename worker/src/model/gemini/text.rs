//! Plain text requests to Gemini's `generateContent`: a system instruction
//! and one user text, without tools. The answer's non-thought text parts,
//! joined, are the completion.

use futures::future::BoxFuture;
use reqwest::header::HeaderMap;
use serde_json::{json, Value};

use super::{generate_path, key_headers, malformed, model_content, parse_usage, GeminiConfig};
use crate::model::http::ModelHttp;
use crate::model::{Completion, ModelError, TextModel};

/// Text requests to one Gemini model.
pub struct GeminiText {
    http: ModelHttp,
    headers: HeaderMap,
    model: String,
}

impl GeminiText {
    pub fn new(config: &GeminiConfig) -> Result<Self, ModelError> {
        let http = ModelHttp::new(config.endpoint.clone())?;
        let headers = key_headers(&http)?;
        Ok(Self { http, headers, model: config.model.clone() })
    }
}

impl TextModel for GeminiText {
    fn complete<'a>(&'a self, instructions: &'a str, prompt: &'a str) -> BoxFuture<'a, Result<Completion, ModelError>> {
        Box::pin(async move {
            let body = json!({
                "systemInstruction": {"parts": [{"text": instructions}]},
                "contents": [{"role": "user", "parts": [{"text": prompt}]}],
            });
            let answer = self.http.post_json(&generate_path(&self.model), &self.headers, &body).await?;
            let content = model_content(&answer)?;
            let parts = content["parts"].as_array().cloned().unwrap_or_default();
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("thought").and_then(Value::as_bool) != Some(true))
                .filter_map(|p| p["text"].as_str())
                .collect();
            if texts.is_empty() {
                return Err(malformed("the answer holds no text"));
            }
            Ok(Completion { text: texts.join(""), usage: parse_usage(&answer) })
        })
    }
}
