//! The member tools of `browser_toolset_20260801`, called with
//! `toolset_name` `browser`: what this client carries out and how each
//! maps to a [`ModelAction`]. Targets are viewport pixels of the screenshot
//! the model saw (`{"type":"coordinate","x","y"}`) or an element reference
//! from `read_page`/`find` (`{"type":"ref","ref"}`). Pointer and keyboard
//! members become the screen actions the computer toolset's do (read by
//! the same [`actions`](super::actions) code); page members become
//! [`BrowserCall`]s.
//!
//! The members a form task needs are carried out; the rest (tabs, drags,
//! zoom, held keys and buttons, and the opt-in members) are sent disabled
//! in the toolset's `configs`, and a call to one is answered as an error.

use flotilla_types::action::{Action, MouseButton};
use serde_json::{json, Map, Value};

use super::actions::{self, Pointer};
use super::tools::ComputerTool;
use crate::model::browser::BrowserCall;
use crate::model::ModelAction;

/// The toolset's name, carried by every member call and echoed by every result.
pub const BROWSER_TOOLSET: &str = "browser";

/// The members carried out here.
pub const CARRIED_OUT: [&str; 16] = [
    "navigate",
    "read_page",
    "find",
    "get_page_text",
    "form_input",
    "scroll_to",
    "screenshot",
    "left_click",
    "right_click",
    "double_click",
    "triple_click",
    "hover",
    "scroll",
    "type",
    "key",
    "wait",
];

/// The members on by default that this client turns off.
pub const TURNED_OFF: [&str; 11] = [
    "zoom",
    "middle_click",
    "left_click_drag",
    "left_mouse_down",
    "left_mouse_up",
    "mouse_move",
    "hold_key",
    "new_tab",
    "list_tabs",
    "switch_tab",
    "close_tab",
];

/// The longest `wait` the toolset allows, in seconds.
const MAX_WAIT_S: f64 = 30.0;

/// The toolset's entry in `tools`, with the members not carried out off.
pub fn definition() -> Value {
    let configs: Map<String, Value> = TURNED_OFF.iter().map(|name| ((*name).to_owned(), json!({ "enabled": false }))).collect();
    json!({ "type": ComputerTool::BrowserToolset20260801.tool_type(), "configs": configs })
}

/// Whether a member's result is an image of its own.
pub fn shows(name: &str) -> bool {
    name == "screenshot"
}

/// A member call's actions, or why it cannot be carried out.
pub fn translate(
    name: &str,
    input: &Map<String, Value>,
    at: &str,
    display: (u32, u32),
    pointer: &mut Pointer,
) -> Result<Vec<ModelAction>, String> {
    if !CARRIED_OUT.contains(&name) {
        return Err(format!("{name} is not available in this browser"));
    }
    let text = |field: &str| input.get(field).and_then(Value::as_str).ok_or_else(|| format!("{at}.{field} must be a string"));
    let browse = |call: BrowserCall| Ok(vec![ModelAction::Browse(call)]);
    match name {
        "navigate" => browse(BrowserCall::from_navigate(text("url")?)),
        "read_page" => {
            let filter = input.get("filter").and_then(Value::as_str).map(str::to_owned);
            if filter.as_deref().is_some_and(|f| f != "interactive" && f != "all") {
                return Err(format!("{at}.filter must be interactive or all"));
            }
            browse(BrowserCall::ReadPage { filter })
        }
        "find" => browse(BrowserCall::Find { query: text("query")?.to_owned() }),
        "get_page_text" => browse(BrowserCall::PageText),
        "form_input" => {
            let value = input.get("value").filter(|v| v.is_string() || v.is_number() || v.is_boolean());
            let value = value.cloned().ok_or_else(|| format!("{at}.value must be a string, number or boolean"))?;
            browse(BrowserCall::FormInput { reference: reference(input, at)?, value })
        }
        "scroll_to" => browse(BrowserCall::ScrollTo { reference: reference(input, at)? }),
        "left_click" | "right_click" | "double_click" | "triple_click" | "hover" => click(name, input, at, display, pointer),
        "scroll" => {
            let [x, y] = coordinate(input, at)?;
            let amount = match input.get("scroll_amount").filter(|v| !v.is_null()) {
                None => 3,
                Some(value) => value
                    .as_u64()
                    .filter(|n| (1..=10).contains(n))
                    .ok_or_else(|| format!("{at}.scroll_amount must be 1 to 10"))?,
            };
            let fields =
                json!({ "coordinate": [x, y], "scroll_direction": input.get("scroll_direction"), "scroll_amount": amount });
            computer(name, &fields, at, display, pointer)
        }
        "wait" => {
            let seconds = input.get("duration").and_then(Value::as_f64).unwrap_or(-1.0);
            if !(0.0..=MAX_WAIT_S).contains(&seconds) {
                return Err(format!("{at}.duration must be 0 to {MAX_WAIT_S} seconds"));
            }
            computer(name, &Value::Object(input.clone()), at, display, pointer)
        }
        "screenshot" => Ok(vec![ModelAction::Act(Action::Screenshot {})]),
        // `type` and `key` take the computer toolset's fields.
        _ => computer(name, &Value::Object(input.clone()), at, display, pointer),
    }
}

/// A click or hover: at a coordinate, the computer toolset's action; on a
/// reference, a browser call.
fn click(
    name: &str,
    input: &Map<String, Value>,
    at: &str,
    display: (u32, u32),
    pointer: &mut Pointer,
) -> Result<Vec<ModelAction>, String> {
    let target = input.get("target").ok_or_else(|| format!("{at}.target is required"))?;
    if target.get("type").and_then(Value::as_str) == Some("ref") {
        let reference = reference(input, at)?;
        let call = match name {
            "hover" => BrowserCall::Hover { reference },
            "right_click" => BrowserCall::Click { reference, button: MouseButton::Right, clicks: 1 },
            "double_click" => BrowserCall::Click { reference, button: MouseButton::Left, clicks: 2 },
            "triple_click" => BrowserCall::Click { reference, button: MouseButton::Left, clicks: 3 },
            _ => BrowserCall::Click { reference, button: MouseButton::Left, clicks: 1 },
        };
        return Ok(vec![ModelAction::Browse(call)]);
    }
    let [x, y] = coordinate(input, at)?;
    if name == "hover" {
        return computer("mouse_move", &json!({ "coordinate": [x, y] }), at, display, pointer);
    }
    let mut fields = json!({ "coordinate": [x, y] });
    if let Some(modifiers) = input.get("modifiers").and_then(Value::as_str) {
        fields["text"] = json!(modifiers);
    }
    computer(name, &fields, at, display, pointer)
}

/// The computer toolset's reading of `fields` for action `name`.
fn computer(
    name: &str,
    fields: &Value,
    at: &str,
    display: (u32, u32),
    pointer: &mut Pointer,
) -> Result<Vec<ModelAction>, String> {
    let empty = Map::new();
    let fields = fields.as_object().unwrap_or(&empty);
    actions::translate(name, fields, at, ComputerTool::Toolset20260801, display, pointer).map_err(|e| e.to_string())
}

/// The `ref` of a ref target.
fn reference(input: &Map<String, Value>, at: &str) -> Result<String, String> {
    let target = input.get("target").filter(|t| t.get("type").and_then(Value::as_str) == Some("ref"));
    let reference = target.and_then(|t| t.get("ref")).and_then(Value::as_str).filter(|r| !r.trim().is_empty());
    reference.map(str::to_owned).ok_or_else(|| format!("{at}.target must be {{\"type\": \"ref\", \"ref\": …}}"))
}

/// `[x, y]` of a coordinate target.
fn coordinate(input: &Map<String, Value>, at: &str) -> Result<[u64; 2], String> {
    let target = input.get("target").filter(|t| t.get("type").and_then(Value::as_str) == Some("coordinate"));
    let point = target.and_then(|t| Some([t.get("x")?.as_u64()?, t.get("y")?.as_u64()?]));
    point.ok_or_else(|| format!("{at}.target must be {{\"type\": \"coordinate\", \"x\": …, \"y\": …}}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn members_map_to_browser_calls_and_screen_actions() {
        let mut pointer = None;
        let mut go = |name: &str, input: Value| translate(name, &fields(input), "input", (800, 600), &mut pointer);
        assert_eq!(
            go("navigate", json!({"url": "http://10.0.0.1/form"})),
            Ok(vec![ModelAction::Browse(BrowserCall::Navigate { url: "http://10.0.0.1/form".into() })])
        );
        assert_eq!(go("navigate", json!({"url": "back"})), Ok(vec![ModelAction::Browse(BrowserCall::Back)]));
        assert_eq!(
            go("form_input", json!({"target": {"type": "ref", "ref": "ref_2"}, "value": "Ada"})),
            Ok(vec![ModelAction::Browse(BrowserCall::FormInput { reference: "ref_2".into(), value: json!("Ada") })])
        );
        assert_eq!(
            go("left_click", json!({"target": {"type": "coordinate", "x": 10, "y": 20}})),
            Ok(vec![ModelAction::Act(Action::Click { x: 10, y: 20, button: MouseButton::Left })])
        );
        assert_eq!(
            go("left_click", json!({"target": {"type": "ref", "ref": "ref_9"}})),
            Ok(vec![ModelAction::Browse(BrowserCall::Click { reference: "ref_9".into(), button: MouseButton::Left, clicks: 1 })])
        );
        assert!(go("left_click", json!({"target": {"type": "coordinate", "x": 900, "y": 20}})).is_err(), "off the viewport");
        assert!(go("wait", json!({"duration": 31})).is_err(), "the browser toolset waits at most 30 s");
        assert_eq!(go("new_tab", json!({})), Err("new_tab is not available in this browser".into()));
    }

    #[test]
    fn the_definition_turns_off_every_member_not_carried_out() {
        let entry = definition();
        assert_eq!(entry["type"], "browser_toolset_20260801");
        for name in TURNED_OFF {
            assert_eq!(entry["configs"][name]["enabled"], false, "{name}");
            assert!(!CARRIED_OUT.contains(&name));
        }
    }
}
