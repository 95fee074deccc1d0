//! How the API's answers become MCP results: a success carries the API's
//! JSON as `structuredContent` and as text; an error answer is a tool error
//! carrying the API's error body (`{"error": {"code", "message", "field"}}`)
//! and its HTTP `status`, so a client reads the same code the API gave. A
//! resource that cannot be read is a protocol error with that body as its
//! data.

use flotilla_client::{ApiResponse, ClientError};
use rmcp::model::CallToolResult;
use rmcp::ErrorData;
use serde_json::{json, Value};

/// A tool's result: the API's answer, or what went wrong.
pub fn tool_result(answer: Result<ApiResponse, ClientError>) -> CallToolResult {
    match answer {
        Ok(response) => CallToolResult::structured(response.value),
        Err(err) => tool_error(&err),
    }
}

/// A failed call as a tool error.
pub fn tool_error(err: &ClientError) -> CallToolResult {
    CallToolResult::structured_error(error_body(err))
}

/// The error as the API states it; a failure to reach the API at all gets a
/// code of its own (`api_unreachable`) with the client's one-line message.
pub fn error_body(err: &ClientError) -> Value {
    match err {
        ClientError::Api(api) => {
            let error = json!({ "code": api.code, "message": api.message, "field": api.field });
            let mut body = json!({ "error": error, "status": api.status });
            if let Some(seconds) = &api.retry_after {
                body["retry_after"] = Value::String(seconds.clone());
            }
            body
        }
        other => json!({ "error": { "code": "api_unreachable", "message": other.to_string(), "field": null } }),
    }
}

/// A resource the API would not give: not found for a 404 (another
/// tenant's task reads as one that does not exist, as on the API), else an
/// invalid request; the API's error body is the data either way.
pub fn resource_error(err: &ClientError) -> ErrorData {
    let body = error_body(err);
    match err {
        ClientError::Api(api) if api.status == 404 => ErrorData::resource_not_found(api.message.clone(), Some(body)),
        ClientError::Api(api) if api.status < 500 => ErrorData::invalid_request(api.message.clone(), Some(body)),
        other => ErrorData::internal_error(other.to_string(), Some(body)),
    }
}
