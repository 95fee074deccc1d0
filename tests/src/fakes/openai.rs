//! Realistic OpenAI Responses API answers for the scripted server: a
//! response around output items, and the items a computer-use model sends
//! (reasoning, computer calls with one action or a GA batch, pending safety
//! checks, a final message), shaped as the API sends them. The
//! `sdk_checks` suite parses each of them with the official Python SDK.

use serde_json::{json, Value};

use super::Reply;

/// A completed response `id` holding `output`, with token usage.
pub fn response(id: &str, output: Vec<Value>, input_tokens: u64, output_tokens: u64) -> Value {
    json!({
        "id": id,
        "object": "response",
        "created_at": 1_767_225_600,
        "status": "completed",
        "model": "computer-use-preview-2025-03-11",
        "output": output,
        "error": null,
        "incomplete_details": null,
        "metadata": {},
        "parallel_tool_calls": true,
        "previous_response_id": null,
        "tool_choice": "auto",
        "tools": [{"type": "computer"}],
        "truncation": "auto",
        "usage": {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        },
    })
}

/// `response` as a `200` reply.
pub fn reply(id: &str, output: Vec<Value>) -> Reply {
    Reply::json(response(id, output, 1_000, 50))
}

/// A reasoning item with one summary text.
pub fn reasoning(summary: &str) -> Value {
    json!({"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": summary}]})
}

/// The preview tool's call: one `action`.
pub fn computer_call(call_id: &str, action: Value) -> Value {
    json!({
        "type": "computer_call",
        "id": format!("cu_{call_id}"),
        "call_id": call_id,
        "action": action,
        "pending_safety_checks": [],
        "status": "completed",
    })
}

/// The GA tool's call: a batch of `actions`, done in order.
pub fn computer_call_batch(call_id: &str, actions: Vec<Value>) -> Value {
    json!({
        "type": "computer_call",
        "id": format!("cu_{call_id}"),
        "call_id": call_id,
        "actions": actions,
        "pending_safety_checks": [],
        "status": "completed",
    })
}

/// `call` with a pending safety check a human must acknowledge.
pub fn with_safety_check(mut call: Value, id: &str, code: &str, message: &str) -> Value {
    call["pending_safety_checks"] = json!([{"id": id, "code": code, "message": message}]);
    call
}

/// The assistant's final message.
pub fn message(text: &str) -> Value {
    json!({
        "type": "message",
        "id": "msg_1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    })
}

/// An error answer as OpenAI sends it.
pub fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::status_json(status, json!({"error": {"message": message, "type": kind, "param": null, "code": null}}))
}

pub fn click(x: u32, y: u32, button: &str) -> Value {
    json!({"type": "click", "x": x, "y": y, "button": button})
}

pub fn keypress(keys: &[&str]) -> Value {
    json!({"type": "keypress", "keys": keys})
}

pub fn type_text(text: &str) -> Value {
    json!({"type": "type", "text": text})
}

pub fn scroll(x: u32, y: u32, scroll_x: i64, scroll_y: i64) -> Value {
    json!({"type": "scroll", "x": x, "y": y, "scroll_x": scroll_x, "scroll_y": scroll_y})
}

/// A call of a function the request offered, with JSON `arguments`.
pub fn function_call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({
        "type": "function_call",
        "id": format!("fc_{call_id}"),
        "call_id": call_id,
        "name": name,
        "arguments": arguments.to_string(),
        "status": "completed",
    })
}
