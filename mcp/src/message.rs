//! The one JSON-RPC message a request to `/mcp` carries: what its envelope
//! must hold, stated once as a JSON Schema (for the API's document) and
//! checked by [`check_message`] before the protocol's service reads it.
//!
//! A client sends requests (with an `id`) and notifications (without one);
//! the server keeps no sessions, so it asks the client nothing and takes no
//! responses. What each method's `params` hold is MCP's: a request the
//! envelope allows is answered in JSON-RPC (an unknown method or bad
//! `params` get a JSON-RPC error, not an HTTP one).
//!
//! Invariant: a body passes [`check_message`] exactly when it is valid by
//! [`message_schema`] (`tests::the_check_and_the_schema_agree`).

use serde_json::{json, Map, Value};

/// The JSON-RPC version every message names.
const VERSION: &str = "2.0";

/// The JSON Schema of a message `/mcp` takes.
pub fn message_schema() -> Value {
    json!({
        "type": "object",
        "description": "One JSON-RPC 2.0 message of the Model Context Protocol: a request (with `id`) or a \
                        notification (without). `params` are the method's, as MCP defines them.",
        "required": ["jsonrpc", "method"],
        "properties": {
            "jsonrpc": {"type": "string", "enum": [VERSION]},
            "method": {"type": "string", "minLength": 1},
            "id": {"oneOf": [
                {"type": "string"},
                {"type": "integer", "minimum": i64::MIN, "maximum": i64::MAX},
            ]},
            "params": {"type": "object"},
        },
    })
}

/// Whether `body` is one message `/mcp` takes; the error names the part
/// that is not.
pub fn check_message(body: &[u8]) -> Result<(), String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(message) = value else {
        return Err("the body must be one JSON-RPC message (an object)".to_owned());
    };
    check_fields(&message)
}

fn check_fields(message: &Map<String, Value>) -> Result<(), String> {
    if message.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
        return Err(format!("jsonrpc must be \"{VERSION}\""));
    }
    match message.get("method").and_then(Value::as_str) {
        Some(method) if !method.is_empty() => {}
        _ => return Err("method must be a non-empty string".to_owned()),
    }
    match message.get("id") {
        None | Some(Value::String(_)) => {}
        Some(Value::Number(n)) if n.is_i64() => {}
        Some(_) => return Err("id must be a string or a 64-bit integer".to_owned()),
    }
    match message.get("params") {
        None | Some(Value::Object(_)) => Ok(()),
        Some(_) => Err("params must be an object".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bodies on both sides of every rule the schema states.
    fn samples() -> Vec<(Value, bool)> {
        vec![
            (json!({"jsonrpc": "2.0", "method": "tools/list", "id": 1}), true),
            (json!({"jsonrpc": "2.0", "method": "notifications/initialized"}), true),
            (json!({"jsonrpc": "2.0", "method": "x", "id": "a", "params": {}, "extra": [1]}), true),
            (json!({"jsonrpc": "2.0", "method": "x", "id": i64::MIN}), true),
            (json!({"jsonrpc": "1.0", "method": "x"}), false),
            (json!({"jsonrpc": 2, "method": "x"}), false),
            (json!({"method": "x"}), false),
            (json!({"jsonrpc": "2.0"}), false),
            (json!({"jsonrpc": "2.0", "method": ""}), false),
            (json!({"jsonrpc": "2.0", "method": 5}), false),
            (json!({"jsonrpc": "2.0", "method": "x", "id": null}), false),
            (json!({"jsonrpc": "2.0", "method": "x", "id": 1.5}), false),
            (json!({"jsonrpc": "2.0", "method": "x", "id": u64::MAX}), false),
            (json!({"jsonrpc": "2.0", "method": "x", "params": [1]}), false),
            (json!({"jsonrpc": "2.0", "method": "x", "params": null}), false),
            (json!([{"jsonrpc": "2.0", "method": "x"}]), false),
            (json!("x"), false),
        ]
    }

    /// A small reading of the schema's own keywords, enough for the ones
    /// `message_schema` uses.
    fn valid(schema: &Value, value: &Value) -> bool {
        if let Some(options) = schema.get("oneOf").and_then(Value::as_array) {
            return options.iter().filter(|option| valid(option, value)).count() == 1;
        }
        let typed = match schema.get("type").and_then(Value::as_str) {
            Some("object") => value.is_object(),
            Some("string") => value.is_string(),
            Some("integer") => value.is_i64(),
            _ => true,
        };
        let listed = schema.get("enum").and_then(Value::as_array).is_none_or(|options| options.contains(value));
        let long =
            schema.get("minLength").and_then(Value::as_u64).is_none_or(|n| value.as_str().is_some_and(|s| s.len() as u64 >= n));
        let required = schema
            .get("required")
            .and_then(Value::as_array)
            .is_none_or(|names| names.iter().filter_map(Value::as_str).all(|name| value.get(name).is_some()));
        let properties = schema.get("properties").and_then(Value::as_object).is_none_or(|properties| {
            properties.iter().all(|(name, property)| value.get(name).is_none_or(|field| valid(property, field)))
        });
        typed && listed && long && required && properties
    }

    #[test]
    fn the_check_and_the_schema_agree() {
        let schema = message_schema();
        for (body, expected) in samples() {
            let checked = check_message(body.to_string().as_bytes());
            assert_eq!(checked.is_ok(), expected, "{body}: {checked:?}");
            assert_eq!(valid(&schema, &body), expected, "the schema on {body}");
        }
    }

    #[test]
    fn a_body_that_is_not_json_is_named_so() {
        let error = check_message(b"{").expect_err("refused");
        assert!(error.starts_with("the body is not JSON"), "{error}");
    }
}
