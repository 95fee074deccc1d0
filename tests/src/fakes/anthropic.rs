//! Answers of the Anthropic Messages API (`POST /v1/messages`) as the real
//! API writes them, for [`super::ScriptedServer`]: assistant messages with
//! `thinking`, `text`, `computer` `tool_use` blocks and the member calls of
//! `computer_toolset_20260801` and of `browser_toolset_20260801` (with
//! `toolset_name` and `caller`), stop
//! reasons and usage, the same messages streamed as server-sent events
//! (what the `claude` CLI asks for), and the API's error bodies, among them
//! the 400 of a model that does not take a tool type. The `sdk_checks`
//! suite parses each of them with the official Python SDK.

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
    signed_thinking(text, "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds")
}

/// A thinking block with its own signature (newer models may send an
/// empty `thinking` with only the signature filled).
pub fn signed_thinking(text: &str, signature: &str) -> Value {
    json!({"type": "thinking", "thinking": text, "signature": signature})
}

/// A member call of `computer_toolset_20260801`: a tool_use named after
/// the member, with `toolset_name` and the direct caller.
pub fn member(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input, "toolset_name": "computer", "caller": {"type": "direct"}})
}

/// A member call of `browser_toolset_20260801`: as [`member`], with
/// `toolset_name` `browser`; targets are `{"type": "coordinate", "x", "y"}`
/// or `{"type": "ref", "ref"}`.
pub fn browser_member(id: &str, name: &str, input: Value) -> Value {
    json!({"type": "tool_use", "id": id, "name": name, "input": input, "toolset_name": "browser", "caller": {"type": "direct"}})
}

/// The 400 a model answers to a tool type it does not take, listing the
/// types it accepts.
pub fn unsupported_tool(model: &str, sent: &str, accepted: &[&str]) -> Reply {
    let message = format!("'{model}' does not support tool types: {sent}. Supported tool types: {}.", accepted.join(", "));
    error(400, "invalid_request_error", &message)
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

/// A message as the API streams it when asked with `stream: true`:
/// `message_start` (the message without content), for each content block a
/// `content_block_start`, one delta and a `content_block_stop`, then
/// `message_delta` (stop reason and output tokens) and `message_stop`.
pub fn streamed(message: &Value) -> Reply {
    let mut start = message.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    let mut events = vec![event("message_start", json!({"type": "message_start", "message": start}))];
    let blocks = message["content"].as_array().cloned().unwrap_or_default();
    for (index, block) in blocks.iter().enumerate() {
        events.extend(streamed_block(index, block));
    }
    events.push(event(
        "message_delta",
        json!({
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": null},
            "usage": {"output_tokens": message["usage"]["output_tokens"]}
        }),
    ));
    events.push(event("message_stop", json!({"type": "message_stop"})));
    Reply::sse(events)
}

/// A streamed turn that says `text` and then calls one tool.
pub fn streamed_tool_turn(text_before: &str, id: &str, name: &str, input: Value) -> Reply {
    streamed(&message(vec![text(text_before), tool_use(id, name, input)], "tool_use"))
}

/// A streamed final answer.
pub fn streamed_answer(answer: &str) -> Reply {
    streamed(&message(vec![text(answer)], "end_turn"))
}

/// One content block's start, delta and stop events.
fn streamed_block(index: usize, block: &Value) -> Vec<(String, String)> {
    let (empty, delta) = match block["type"].as_str() {
        Some("tool_use") => {
            let mut empty = block.clone();
            empty["input"] = json!({});
            (empty, json!({"type": "input_json_delta", "partial_json": block["input"].to_string()}))
        }
        Some("thinking") => {
            (json!({"type": "thinking", "thinking": ""}), json!({"type": "thinking_delta", "thinking": block["thinking"]}))
        }
        _ => (json!({"type": "text", "text": ""}), json!({"type": "text_delta", "text": block["text"]})),
    };
    let mut events = vec![
        event("content_block_start", json!({"type": "content_block_start", "index": index, "content_block": empty})),
        event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": delta})),
    ];
    if block["type"] == "thinking" {
        let signature = json!({"type": "signature_delta", "signature": block["signature"]});
        events.push(event("content_block_delta", json!({"type": "content_block_delta", "index": index, "delta": signature})));
    }
    events.push(event("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    events
}

fn event(name: &str, data: Value) -> (String, String) {
    (name.to_owned(), data.to_string())
}
