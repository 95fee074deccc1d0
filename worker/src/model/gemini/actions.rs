//! Gemini's predefined computer-use functions as our actions. The model
//! writes points on a 1000×1000 grid (0–999 each way); they stay on that
//! grid here and the step loop maps them onto the sandbox's screen.
//!
//! Both name sets are accepted, whatever the model:
//!
//! | Gemini 3.x | legacy | ours |
//! |---|---|---|
//! | `click`, `double_click`, `triple_click`, `middle_click`, `right_click` | `click_at` | `Click`, `DoubleClick`, `TripleClick` |
//! | `move` | `hover_at` | `Move` |
//! | `mouse_down`, `mouse_up` (optional `x`, `y`) | | `Move`, `MouseDown` / `MouseUp` |
//! | `type` (`press_enter` false) | `type_text_at` (click first, `clear_before_typing` and `press_enter` true) | `Type` (after `ctrl+a`, `Delete`; then `Return`) |
//! | `press_key`, `hotkey` | `key_combination` (`"Control+A"`) | `Keypress` |
//! | `key_down`, `key_up` | | `KeyDown`, `KeyUp` |
//! | `drag_and_drop` (`start_x`…`end_y` or `x`, `y`, `destination_x`, `destination_y`) | same | `Drag` |
//! | `scroll` (`magnitude_in_pixels` or `magnitude`) | `scroll_at`, `scroll_document` | `Scroll`, one wheel click per 100 of magnitude |
//! | `wait` (`seconds`, 1) | `wait_5_seconds` | `Wait` |
//! | `take_screenshot` | | `Screenshot` |
//!
//! Browser-only functions (`navigate`, `go_back`, `go_forward`, `search`,
//! `open_web_browser`) are browser calls in the browser environment
//! ([`browser_call`]) and refused on a desktop; anything unknown is refused; a
//! call whose arguments do not hold is refused too, saying which: the
//! model gets the error as the call's result.

use flotilla_types::action::{Action, MouseButton};
use serde_json::{Map, Value};

use crate::model::browser::BrowserCall;
use crate::model::openai::key_name;
use crate::model::ModelAction;

/// The grid Gemini's points are on.
pub const GRID: (u32, u32) = (1000, 1000);
/// Magnitude units per wheel click.
const MAGNITUDE_PER_CLICK: f64 = 100.0;

/// The actions one function call asks for, or why it cannot be done.
pub fn translate(name: &str, args: &Map<String, Value>) -> Result<Vec<Action>, String> {
    let a = Args(args);
    let click = |button| -> Result<Vec<Action>, String> {
        let [x, y] = a.point("x", "y")?;
        Ok(vec![Action::Click { x, y, button }])
    };
    let actions = match name {
        "click" | "click_at" => click(MouseButton::Left)?,
        "right_click" => click(MouseButton::Right)?,
        "middle_click" => click(MouseButton::Middle)?,
        "double_click" => {
            let [x, y] = a.point("x", "y")?;
            vec![Action::DoubleClick { x, y }]
        }
        "triple_click" => {
            let [x, y] = a.point("x", "y")?;
            vec![Action::TripleClick { x, y }]
        }
        "move" | "hover_at" => {
            let [x, y] = a.point("x", "y")?;
            vec![Action::Move { x, y }]
        }
        "mouse_down" => a.pressed(Action::MouseDown { button: MouseButton::Left })?,
        "mouse_up" => a.pressed(Action::MouseUp { button: MouseButton::Left })?,
        "type" => a.typed(false, false, false)?,
        "type_text_at" => a.typed(true, a.flag("clear_before_typing", true)?, a.flag("press_enter", true)?)?,
        "press_key" => vec![Action::Keypress { keys: keys(&[a.string("key")?])? }],
        "key_down" => vec![Action::KeyDown { keys: keys(&[a.string("key")?])? }],
        "key_up" => vec![Action::KeyUp { keys: keys(&[a.string("key")?])? }],
        "hotkey" => vec![Action::Keypress { keys: keys(&a.strings("keys")?)? }],
        "key_combination" => {
            let combination = a.string("keys")?;
            vec![Action::Keypress { keys: keys(&combination.split('+').collect::<Vec<_>>())? }]
        }
        "drag_and_drop" => {
            let start = a.point("start_x", "start_y").or_else(|_| a.point("x", "y"))?;
            let end = a.point("end_x", "end_y").or_else(|_| a.point("destination_x", "destination_y"))?;
            vec![Action::Drag { path: vec![start, end] }]
        }
        "scroll" | "scroll_at" => {
            let [x, y] = a.point("x", "y")?;
            a.scroll(x, y, if name == "scroll" { 300.0 } else { 800.0 })?
        }
        "scroll_document" => a.scroll(GRID.0 / 2, GRID.1 / 2, 800.0)?,
        "wait" => vec![Action::Wait { ms: a.seconds("seconds", 1.0)? }],
        "wait_5_seconds" => vec![Action::Wait { ms: 5_000 }],
        "take_screenshot" => vec![Action::Screenshot {}],
        "navigate" | "go_back" | "go_forward" | "search" | "open_web_browser" => {
            return Err(format!("{name} works only in a browser environment; this is a desktop"))
        }
        other => return Err(format!("{other:?} is not a computer-use function")),
    };
    for action in &actions {
        action.validate().map_err(|e| format!("{name} asks for too much: {e}"))?;
    }
    Ok(actions)
}

/// The function's arguments, read with errors that name them.
struct Args<'a>(&'a Map<String, Value>);

impl Args<'_> {
    fn point(&self, x: &str, y: &str) -> Result<[u32; 2], String> {
        Ok([self.coordinate(x)?, self.coordinate(y)?])
    }

    /// A normalized coordinate, 0 to 999.
    fn coordinate(&self, name: &str) -> Result<u32, String> {
        let value = self.0.get(name).and_then(Value::as_f64).filter(|v| v.fract() == 0.0);
        match value {
            Some(v) if (0.0..f64::from(GRID.0)).contains(&v) => Ok(v as u32),
            _ => Err(format!("{name} must be a whole number from 0 to 999")),
        }
    }

    fn string(&self, name: &str) -> Result<&str, String> {
        self.0.get(name).and_then(Value::as_str).ok_or_else(|| format!("{name} must be a string"))
    }

    fn strings(&self, name: &str) -> Result<Vec<&str>, String> {
        let items = self.0.get(name).and_then(Value::as_array).ok_or_else(|| format!("{name} must be a list of keys"))?;
        items.iter().map(|item| item.as_str().ok_or_else(|| format!("{name} must be a list of keys"))).collect()
    }

    fn flag(&self, name: &str, default: bool) -> Result<bool, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(flag)) => Ok(*flag),
            Some(_) => Err(format!("{name} must be true or false")),
        }
    }

    fn number(&self, name: &str, default: f64) -> Result<f64, String> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(default),
            Some(value) => {
                value.as_f64().filter(|n| n.is_finite() && *n >= 0.0).ok_or_else(|| format!("{name} must be a number"))
            }
        }
    }

    fn seconds(&self, name: &str, default: f64) -> Result<u64, String> {
        Ok((self.number(name, default)? * 1000.0).round() as u64)
    }

    /// A button press or release, moving there first when told where.
    fn pressed(&self, action: Action) -> Result<Vec<Action>, String> {
        let mut actions = Vec::with_capacity(2);
        if self.0.contains_key("x") || self.0.contains_key("y") {
            let [x, y] = self.point("x", "y")?;
            actions.push(Action::Move { x, y });
        }
        actions.push(action);
        Ok(actions)
    }

    /// Typing `text`: clicking at `x`, `y` first when `at`, selecting and
    /// deleting what is there when `clear`, pressing Enter after when
    /// `press_enter` (or the call's own `press_enter`, for `type`).
    fn typed(&self, at: bool, clear: bool, press_enter: bool) -> Result<Vec<Action>, String> {
        let mut actions = Vec::new();
        if at {
            let [x, y] = self.point("x", "y")?;
            actions.push(Action::Click { x, y, button: MouseButton::Left });
        }
        if clear {
            actions.push(Action::Keypress { keys: vec!["ctrl".into(), "a".into()] });
            actions.push(Action::Keypress { keys: vec!["Delete".into()] });
        }
        let text = self.string("text")?;
        if !text.is_empty() {
            actions.push(Action::Type { text: text.to_owned() });
        }
        if press_enter || (!at && self.flag("press_enter", false)?) {
            actions.push(Action::Keypress { keys: vec!["Return".into()] });
        }
        Ok(actions)
    }

    fn scroll(&self, x: u32, y: u32, default_magnitude: f64) -> Result<Vec<Action>, String> {
        let magnitude = match self.0.get("magnitude_in_pixels") {
            Some(_) => self.number("magnitude_in_pixels", default_magnitude)?,
            None => self.number("magnitude", default_magnitude)?,
        };
        let clicks = ((magnitude / MAGNITUDE_PER_CLICK).round() as i32).max(1);
        let (scroll_x, scroll_y) = match self.string("direction")? {
            "up" => (0, -clicks),
            "down" => (0, clicks),
            "left" => (-clicks, 0),
            "right" => (clicks, 0),
            _ => return Err("direction must be up, down, left or right".into()),
        };
        Ok(vec![Action::Scroll { x, y, scroll_x, scroll_y }])
    }
}

/// Our names for Gemini's key names (`Control`, `Enter`, `a`).
fn keys(names: &[&str]) -> Result<Vec<String>, String> {
    names
        .iter()
        .map(|name| {
            let trimmed = name.trim();
            key_name(trimmed).ok_or_else(|| format!("{trimmed:?} is not a key we know"))
        })
        .collect()
}

/// Where the browser environment's `search` goes.
pub const SEARCH_URL: &str = "https://www.google.com/";

/// A browser environment's own function as a browser call, if it is one.
pub fn browser_call(name: &str, args: &Map<String, Value>) -> Option<Result<BrowserCall, String>> {
    Some(match name {
        "navigate" => match args.get("url").and_then(Value::as_str).filter(|u| !u.trim().is_empty()) {
            Some(url) => Ok(BrowserCall::Navigate { url: url.to_owned() }),
            None => Err("url must be a non-empty string".to_owned()),
        },
        "go_back" => Ok(BrowserCall::Back),
        "go_forward" => Ok(BrowserCall::Forward),
        "search" => Ok(BrowserCall::Navigate { url: SEARCH_URL.to_owned() }),
        "open_web_browser" => Ok(BrowserCall::ListTabs),
        _ => return None,
    })
}

/// A call's actions as the step loop takes them: refused as a whole when
/// it cannot be done. In the browser environment its own functions are
/// browser calls.
pub fn model_actions(name: &str, args: &Map<String, Value>, browser: bool) -> Vec<ModelAction> {
    if browser {
        match browser_call(name, args) {
            Some(Ok(call)) => return vec![ModelAction::Browse(call)],
            Some(Err(reason)) => return vec![ModelAction::Refuse { reason: format!("{name}: {reason}") }],
            None => {}
        }
    }
    match translate(name, args) {
        Ok(actions) => actions.into_iter().map(ModelAction::Act).collect(),
        Err(reason) => vec![ModelAction::Refuse { reason: format!("{name}: {reason}") }],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(name: &str, args: Value) -> Result<Vec<Action>, String> {
        translate(name, args.as_object().expect("an object"))
    }

    #[test]
    fn both_name_sets_click_on_the_grid() {
        let centre = vec![Action::Click { x: 500, y: 500, button: MouseButton::Left }];
        assert_eq!(map("click", json!({"x": 500, "y": 500, "intent": "press OK"})), Ok(centre.clone()));
        assert_eq!(map("click_at", json!({"x": 500, "y": 500})), Ok(centre));
        assert_eq!(map("hover_at", json!({"x": 0, "y": 999})), Ok(vec![Action::Move { x: 0, y: 999 }]));
        assert!(map("click", json!({"x": 1000, "y": 5})).is_err_and(|e| e.contains("x must be")));
    }

    #[test]
    fn typing_keys_drags_and_scrolls_map() {
        assert_eq!(
            map("type_text_at", json!({"x": 10, "y": 20, "text": "hi"})),
            Ok(vec![
                Action::Click { x: 10, y: 20, button: MouseButton::Left },
                Action::Keypress { keys: vec!["ctrl".into(), "a".into()] },
                Action::Keypress { keys: vec!["Delete".into()] },
                Action::Type { text: "hi".into() },
                Action::Keypress { keys: vec!["Return".into()] },
            ])
        );
        assert_eq!(map("type", json!({"text": "hi"})), Ok(vec![Action::Type { text: "hi".into() }]));
        let ctrl_a = Ok(vec![Action::Keypress { keys: vec!["ctrl".into(), "a".into()] }]);
        assert_eq!(map("key_combination", json!({"keys": "Control+A"})).map(|a| a.len()), Ok(1));
        assert_eq!(map("hotkey", json!({"keys": ["Control", "a"]})), ctrl_a);
        assert_eq!(
            map("drag_and_drop", json!({"start_x": 1, "start_y": 2, "end_x": 3, "end_y": 4})),
            Ok(vec![Action::Drag { path: vec![[1, 2], [3, 4]] }])
        );
        assert_eq!(
            map("drag_and_drop", json!({"x": 1, "y": 2, "destination_x": 3, "destination_y": 4})),
            Ok(vec![Action::Drag { path: vec![[1, 2], [3, 4]] }])
        );
        assert_eq!(
            map("scroll", json!({"x": 5, "y": 6, "direction": "down"})),
            Ok(vec![Action::Scroll { x: 5, y: 6, scroll_x: 0, scroll_y: 3 }])
        );
        assert_eq!(
            map("scroll_at", json!({"x": 5, "y": 6, "direction": "left", "magnitude": 800})),
            Ok(vec![Action::Scroll { x: 5, y: 6, scroll_x: -8, scroll_y: 0 }])
        );
        assert_eq!(map("wait_5_seconds", json!({})), Ok(vec![Action::Wait { ms: 5_000 }]));
        assert_eq!(map("take_screenshot", json!({})), Ok(vec![Action::Screenshot {}]));
        assert!(map("navigate", json!({"url": "https://example.com"})).is_err());
        assert!(map("teleport", json!({})).is_err());
    }
}
