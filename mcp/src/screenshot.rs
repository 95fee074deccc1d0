//! A task's stored screenshot as image data: the task's record lists its
//! screenshots (latest attempt), each with a presigned link; the one asked
//! for (or the latest) is fetched through its link and base64-encoded, as
//! MCP carries images.

use base64::Engine;
use flotilla_client::{Client, ClientError};
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::ErrorData;
use serde_json::{json, Value};

use crate::answer::{error_body, resource_error};

/// Screenshots are PNGs of a desktop; anything past this is not one.
const MAX_SCREENSHOT_BYTES: usize = 32 * 1024 * 1024;
const PNG: &str = "image/png";

/// A fetched screenshot.
pub struct Screenshot {
    /// The task's `screenshots` entry: `seq`, `hash`, `key`, `url`.
    pub listed: Value,
    pub base64: String,
    pub mime_type: String,
}

/// Why a screenshot could not be had.
pub enum ScreenshotError {
    /// The API refused (no such task, …) or could not be reached.
    Api(ClientError),
    /// The task has no screenshot with that seq (or none at all), or no
    /// store to fetch it from.
    Missing { code: &'static str, message: String },
}

impl ScreenshotError {
    fn body(&self) -> Value {
        match self {
            ScreenshotError::Api(err) => error_body(err),
            ScreenshotError::Missing { code, message } => json!({ "error": { "code": code, "message": message, "field": null } }),
        }
    }

    /// As a tool error.
    pub fn into_tool_result(self) -> CallToolResult {
        CallToolResult::structured_error(self.body())
    }

    /// As the error of a resource read.
    pub fn into_resource_error(self) -> ErrorData {
        match &self {
            ScreenshotError::Api(err) => resource_error(err),
            ScreenshotError::Missing { message, .. } => ErrorData::resource_not_found(message.clone(), Some(self.body())),
        }
    }
}

/// The screenshot of task `id` whose event is `seq`, or its latest.
pub async fn fetch(client: &Client, id: &str, seq: Option<u64>) -> Result<Screenshot, ScreenshotError> {
    let task = client.get(&["v1", "tasks", id], &[]).await.map_err(ScreenshotError::Api)?.value;
    let listed = task.get("screenshots").and_then(Value::as_array).cloned().unwrap_or_default();
    let chosen = match seq {
        Some(seq) => listed.into_iter().find(|shot| shot.get("seq").and_then(Value::as_u64) == Some(seq)),
        None => listed.into_iter().last(),
    };
    let Some(listed) = chosen else {
        let message = match seq {
            Some(seq) => format!("task {id} stored no screenshot at seq {seq}"),
            None => format!("task {id} stored no screenshot yet"),
        };
        return Err(ScreenshotError::Missing { code: "not_found", message });
    };
    let Some(url) = listed.get("url").and_then(Value::as_str) else {
        let message = "screenshots are not stored on this fleet (no object store)".to_owned();
        return Err(ScreenshotError::Missing { code: "not_stored", message });
    };
    let (bytes, content_type) = client.fetch_link(url, MAX_SCREENSHOT_BYTES).await.map_err(ScreenshotError::Api)?;
    let mime_type = content_type.filter(|kind| kind.starts_with("image/")).unwrap_or_else(|| PNG.to_owned());
    let base64 = base64::engine::general_purpose::STANDARD.encode(bytes);
    Ok(Screenshot { listed, base64, mime_type })
}

/// `get_screenshot`'s result: the image, and the task's entry for it as
/// structured content and text.
pub fn tool_result(shot: Screenshot) -> CallToolResult {
    let mut result = CallToolResult::structured(shot.listed);
    result.content.push(ContentBlock::image(shot.base64, shot.mime_type));
    result
}
