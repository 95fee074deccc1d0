//! Answers of the Anthropic Messages API (`POST /v1/messages`) as the real
//! API writes them, for [`super::ScriptedServer`]: assistant messages with
//! `thinking`, `text` and `computer` `tool_use` blocks, stop reasons and
//! usage, and the API's error bodies.

use serde_json::{json, Value};

use super::Reply;

/// The usage every scripted message reports.
pub const INPUT_TOKENS: u64 = 1520;
pub const CACHE_READ_INPUT_TOKENS: u64 = 200;
pub const OUTPUT_TOKENS: u64 = 87;

/// An assistant message with these content blocks and stop reason.
pub fn message(content: Vec<Value>, stop_reason: &str) -> Value {
    json!({
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": INPUT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": CACHE_READ_INPUT_TOKENS,
            "output_tokens": OUTPUT_TOKENS,
            "service_tier": "standard"
        }
    })
}

/// A `computer` tool_use block; `input` holds `action` and its parameters.
pub fn computer(id: &str, input: Value) -> Value {
    tool_use(id, "computer", input)
}

/// A tool_use block of any tool.
pub fn tool_use(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input})
}

/// A thinking block, signed as the API signs them.
pub fn thinking(text: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"})
}

pub fn text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// A turn that asks for one computer action.
pub fn action_turn(id: &str, input: Value) -> Reply {
    Reply::json(message(vec![computer(id, input)], "tool_use"))
}

/// A final answer: text and `end_turn`.
pub fn final_answer(answer: &str) -> Reply {
    Reply::json(message(vec![text(answer)], "end_turn"))
}

/// An error answer, e.g. `(429, "rate_limit_error", "…")`,
/// `(529, "overloaded_error", "Overloaded")` or
/// `(401, "authentication_error", "invalid x-api-key")`.
pub fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::status_json(status, json!({"type": "error", "error": {"type": kind, "message": message}}))
        .header("request-id", "req_011CSHoEeqs5C35K2UUqR7Fy")
}
