//! What keeps a Claude conversation's prompt cache reading: the
//! `cache_control` breakpoints a request carries, and which screenshots
//! its history keeps (see [`ImageHistory`]).
//!
//! - Breakpoints: on the system prompt (made a text block) or, without
//!   one, on the last tool, which caches the tools and system prompt; then
//!   on the last block of each of the newest user turns, [`MAX_BREAKPOINTS`]
//!   in all, as the API allows. They are put on the request only, so the
//!   kept history is the same from turn to turn.
//! - The older tools' history: the client replaces the oldest screenshots
//!   by a placeholder a chunk at a time.
//! - The toolset's history is append-only (every assistant message goes
//!   back as received); its screenshots are dropped by the documented
//!   server-side tool-result clearing, asked for a chunk at a time: each
//!   request says how many of the newest tool results to keep, so the
//!   cleared part grows by whole chunks and the prefix before the kept
//!   results stays the same in between.

use serde_json::{json, Value};

use super::super::history::ImageHistory;

/// The most `cache_control` breakpoints one request may carry.
pub const MAX_BREAKPOINTS: usize = 4;
/// The toolset's history before chunks: every tool result kept until
/// there are more than 20, then the newest 5.
pub const TOOLSET_CLEARING: ImageHistory = ImageHistory { keep: 5, chunk: 1, after: 20 };
/// The placeholder of an older screenshot in the older tools' history.
pub const OLDER_SCREENSHOT: &str = "[an earlier screenshot, no longer shown]";

/// Puts breakpoints on a request body.
pub fn add_breakpoints(body: &mut Value) {
    let breakpoint = json!({"type": "ephemeral"});
    if let Some(system) = body.get("system").and_then(Value::as_str).map(str::to_owned) {
        body["system"] = json!([{"type": "text", "text": system, "cache_control": breakpoint}]);
    } else if let Some(last_tool) = body["tools"].as_array_mut().and_then(|tools| tools.last_mut()) {
        last_tool["cache_control"] = breakpoint.clone();
    }
    let Some(messages) = body["messages"].as_array_mut() else { return };
    let newest_user_turns = messages.iter_mut().rev().filter(|m| m["role"] == "user").take(MAX_BREAKPOINTS - 1);
    for message in newest_user_turns {
        if let Some(last) = message["content"].as_array_mut().and_then(|blocks| blocks.last_mut()) {
            last["cache_control"] = breakpoint.clone();
        }
    }
}

/// The `clear_tool_uses_20250919` edit that keeps what `history` keeps of
/// `results` tool results; `None` while it drops none.
pub fn clearing_edit(history: ImageHistory, results: usize) -> Option<Value> {
    let cleared = history.to_drop(results);
    if cleared == 0 {
        return None;
    }
    Some(json!({
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": results - 1},
        "keep": {"type": "tool_uses", "value": results - cleared},
    }))
}

/// Replaces the `count` oldest image blocks of the conversation, also
/// those nested in tool_results, by the placeholder text.
pub fn forget_oldest_images(messages: &mut [Value], mut count: usize) {
    let blocks = messages.iter_mut().filter_map(|m| m.get_mut("content").and_then(Value::as_array_mut)).flatten();
    for block in blocks {
        if count == 0 {
            return;
        }
        if is_image(block) {
            *block = older_screenshot();
            count -= 1;
        } else if let Some(Value::Array(nested)) = block.get_mut("content") {
            for inner in nested.iter_mut().filter(|b| is_image(b)) {
                if count == 0 {
                    return;
                }
                *inner = older_screenshot();
                count -= 1;
            }
        }
    }
}

pub fn older_screenshot() -> Value {
    json!({"type": "text", "text": OLDER_SCREENSHOT})
}

pub fn is_image(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("image")
}

/// The image blocks of a conversation, those nested in tool_results too.
pub fn count_images(messages: &[Value]) -> usize {
    messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .map(|block| match block["content"].as_array() {
            Some(nested) => nested.iter().filter(|b| is_image(b)).count(),
            None => usize::from(is_image(block)),
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_breakpoints_at_most_on_the_system_prompt_and_the_newest_user_turns() {
        let turn = |role: &str| json!({"role": role, "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]});
        let mut body = json!({"system": "s", "tools": [{"name": "t"}], "messages": (0..9).map(|i| turn(if i % 2 == 0 { "user" } else { "assistant" })).collect::<Vec<_>>()});
        add_breakpoints(&mut body);
        let text = body.to_string();
        assert_eq!(text.matches("cache_control").count(), MAX_BREAKPOINTS, "{text}");
        assert!(body["system"][0]["cache_control"].is_object());
        assert!(body["tools"][0].get("cache_control").is_none(), "the system prompt's breakpoint covers the tools");
        for (index, breakpoint) in [(8, true), (6, true), (4, true), (2, false)] {
            assert_eq!(body["messages"][index]["content"][1].get("cache_control").is_some(), breakpoint, "{index}");
            assert!(body["messages"][index]["content"][0].get("cache_control").is_none());
        }
    }

    #[test]
    fn without_a_system_prompt_the_last_tool_is_the_first_breakpoint() {
        let mut body = json!({"tools": [{"name": "a"}, {"name": "b"}], "messages": []});
        add_breakpoints(&mut body);
        assert!(body["tools"][1]["cache_control"].is_object() && body["tools"][0].get("cache_control").is_none());
    }

    #[test]
    fn the_toolset_clears_in_chunks_and_today_past_twenty() {
        assert_eq!(clearing_edit(TOOLSET_CLEARING, 20), None);
        assert_eq!(clearing_edit(TOOLSET_CLEARING, 21).map(|e| e["keep"]["value"].clone()), Some(json!(5)));
        let chunked = ImageHistory::new(3, 10);
        assert_eq!(clearing_edit(chunked, 12), None);
        for results in 13..=22 {
            assert_eq!(clearing_edit(chunked, results).map(|e| e["keep"]["value"].clone()), Some(json!(results - 10)));
        }
    }
}
