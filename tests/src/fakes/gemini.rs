//! Answers of the Gemini API's `generateContent`
//! (`POST /v1beta/models/{model}:generateContent`) as the real API writes
//! them, for [`super::ScriptedServer`]: a candidate whose content holds
//! thought parts, text and `functionCall` parts of the computer-use
//! functions (the first call carrying a `thoughtSignature`), a finish
//! reason and `usageMetadata`, and the API's error bodies. The
//! `sdk_checks` suite parses each of them with the official Python SDK.

use serde_json::{json, Value};

use super::Reply;

/// The usage every scripted answer reports.
pub const PROMPT_TOKENS: u64 = 1290;
pub const CANDIDATE_TOKENS: u64 = 41;
pub const THOUGHT_TOKENS: u64 = 120;

/// The signature the first function call of a turn carries.
pub const THOUGHT_SIGNATURE: &str = "CiQB0e2Kb7c6Yq0sVd1nO2zJfZ8Xy4Qma3ecHnOw99XuF3kfTg==";

/// An answer whose model content holds `parts`.
pub fn response(parts: Vec<Value>) -> Value {
    json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts},
            "finishReason": "STOP",
            "index": 0
        }],
        "usageMetadata": {
            "promptTokenCount": PROMPT_TOKENS,
            "candidatesTokenCount": CANDIDATE_TOKENS,
            "thoughtsTokenCount": THOUGHT_TOKENS,
            "totalTokenCount": PROMPT_TOKENS + CANDIDATE_TOKENS + THOUGHT_TOKENS
        },
        "modelVersion": "gemini-3.6-flash",
        "responseId": "mIzEaO2tGfKvz7IP1YSH4Ak"
    })
}

/// A summarized thought.
pub fn thought(text: &str) -> Value {
    json!({"text": text, "thought": true})
}

pub fn text(text: &str) -> Value {
    json!({"text": text})
}

/// A function call part.
pub fn call(name: &str, args: Value) -> Value {
    json!({"functionCall": {"name": name, "args": args}})
}

/// A turn of parts; the first function call carries the turn's thought
/// signature.
pub fn calls_turn(mut parts: Vec<Value>) -> Reply {
    if let Some(first) = parts.iter_mut().find(|part| part.get("functionCall").is_some()) {
        first["thoughtSignature"] = json!(THOUGHT_SIGNATURE);
    }
    Reply::json(response(parts))
}

/// `args` with a safety decision that asks for confirmation.
pub fn confirming(mut args: Value, explanation: &str) -> Value {
    args["safety_decision"] = json!({"decision": "require_confirmation", "explanation": explanation});
    args
}

/// A final answer.
pub fn final_answer(answer: &str) -> Reply {
    Reply::json(response(vec![text(answer)]))
}

/// An error answer, e.g. `(429, "RESOURCE_EXHAUSTED", "…")`.
pub fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::status_json(status, json!({"error": {"code": status, "message": message, "status": kind}}))
}
