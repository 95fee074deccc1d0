//! Screen actions as DevTools input events: pointer actions become
//! `Input.dispatchMouseEvent` at viewport pixels, typing
//! `Input.insertText` (a newline presses Enter), key names (the contract's,
//! through the shared keysym table) `Input.dispatchKeyEvent` with the DOM
//! `key`, `code` and key code a page's handlers read.

use flotilla_types::action::{Action, MouseButton};
use serde_json::{json, Value};

use crate::sandbox::keyboard;

/// One DevTools input command.
#[derive(Debug, Clone, PartialEq)]
pub enum InputEvent {
    /// `Input.dispatchMouseEvent` with these parameters.
    Mouse(Value),
    /// `Input.dispatchKeyEvent` with these parameters.
    Key(Value),
    /// `Input.insertText`.
    Text(String),
    /// A pause (the `wait` action).
    Pause(u64),
}

/// A key as the DOM names it.
#[derive(Debug, Clone, PartialEq)]
struct DomKey {
    key: String,
    code: String,
    key_code: u32,
    /// The modifier bit it sets while down (Alt 1, Ctrl 2, Meta 4, Shift 8).
    modifier: u32,
    /// What typing it inserts, when it inserts something.
    text: Option<String>,
}

/// The events that perform `action` with the pointer at `pointer`; an
/// error names a key the table does not know.
pub fn events(action: &Action, pointer: (u32, u32)) -> Result<Vec<InputEvent>, String> {
    let at = |kind: &str, x: u32, y: u32, button: &str, clicks: u32| {
        InputEvent::Mouse(json!({"type": kind, "x": x, "y": y, "button": button, "clickCount": clicks}))
    };
    let click = |x: u32, y: u32, button: &str, clicks: u32| {
        let mut out = vec![at("mouseMoved", x, y, "none", 0)];
        for count in 1..=clicks {
            out.push(at("mousePressed", x, y, button, count));
            out.push(at("mouseReleased", x, y, button, count));
        }
        out
    };
    let (px, py) = pointer;
    Ok(match action {
        Action::Click { x, y, button } => click(*x, *y, button_name(*button), 1),
        Action::DoubleClick { x, y } => click(*x, *y, "left", 2),
        Action::TripleClick { x, y } => click(*x, *y, "left", 3),
        Action::Move { x, y } => vec![at("mouseMoved", *x, *y, "none", 0)],
        Action::MouseDown { button } => vec![at("mousePressed", px, py, button_name(*button), 1)],
        Action::MouseUp { button } => vec![at("mouseReleased", px, py, button_name(*button), 1)],
        Action::Drag { path } => drag(path),
        Action::Scroll { x, y, scroll_x, scroll_y } => vec![InputEvent::Mouse(json!({
            "type": "mouseWheel", "x": x, "y": y, "deltaX": scroll_x * WHEEL_PX, "deltaY": scroll_y * WHEEL_PX
        }))],
        Action::Type { text } => typing(text),
        Action::Keypress { keys } => chord(keys)?,
        Action::KeyDown { keys } => dom_keys(keys)?.iter().map(|key| key_event("rawKeyDown", key, 0)).collect(),
        Action::KeyUp { keys } => dom_keys(keys)?.iter().rev().map(|key| key_event("keyUp", key, 0)).collect(),
        Action::Wait { ms } => vec![InputEvent::Pause(*ms)],
        // A confirmation is cleared by the pipeline, never on the page.
        Action::Screenshot {} | Action::Confirm { .. } => Vec::new(),
    })
}

/// Where the pointer is after `action`, if it moves it.
pub fn pointer_after(action: &Action) -> Option<(u32, u32)> {
    match action {
        Action::Click { x, y, .. }
        | Action::DoubleClick { x, y }
        | Action::TripleClick { x, y }
        | Action::Move { x, y }
        | Action::Scroll { x, y, .. } => Some((*x, *y)),
        Action::Drag { path } => path.last().map(|[x, y]| (*x, *y)),
        _ => None,
    }
}

/// CSS pixels one wheel click scrolls.
const WHEEL_PX: i32 = 100;

fn button_name(button: MouseButton) -> &'static str {
    match button {
        MouseButton::Left => "left",
        MouseButton::Right => "right",
        MouseButton::Middle => "middle",
    }
}

fn drag(path: &[[u32; 2]]) -> Vec<InputEvent> {
    let mouse = |kind: &str, [x, y]: [u32; 2], clicks: u32| {
        InputEvent::Mouse(json!({"type": kind, "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": clicks}))
    };
    let (Some(first), Some(last)) = (path.first(), path.last()) else {
        return Vec::new();
    };
    let mut out = vec![mouse("mousePressed", *first, 1)];
    out.extend(path.iter().skip(1).map(|point| mouse("mouseMoved", *point, 0)));
    out.push(mouse("mouseReleased", *last, 1));
    out
}

/// Text inserted as typed; each newline is an Enter press.
fn typing(text: &str) -> Vec<InputEvent> {
    let mut out = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        if index > 0 {
            let enter = enter();
            out.push(key_event("keyDown", &enter, 0));
            out.push(key_event("keyUp", &enter, 0));
        }
        if !line.is_empty() {
            out.push(InputEvent::Text(line.to_owned()));
        }
    }
    out
}

/// A chord: modifiers down, the last key pressed and released with them
/// held, modifiers up in reverse.
fn chord(keys: &[String]) -> Result<Vec<InputEvent>, String> {
    let keys = dom_keys(keys)?;
    let Some((last, modifiers)) = keys.split_last() else {
        return Ok(Vec::new());
    };
    let mut held = 0;
    let mut out = Vec::new();
    for key in modifiers {
        held |= key.modifier;
        out.push(key_event("rawKeyDown", key, held));
    }
    let typed = if held & !8 == 0 { last.text.is_some() } else { false };
    out.push(key_event(if typed { "keyDown" } else { "rawKeyDown" }, last, held | last.modifier));
    out.push(key_event("keyUp", last, held));
    for key in modifiers.iter().rev() {
        held &= !key.modifier;
        out.push(key_event("keyUp", key, held));
    }
    Ok(out)
}

fn key_event(kind: &str, key: &DomKey, modifiers: u32) -> InputEvent {
    let mut params = json!({
        "type": kind, "key": key.key, "code": key.code, "windowsVirtualKeyCode": key.key_code,
        "nativeVirtualKeyCode": key.key_code, "modifiers": modifiers,
    });
    if kind == "keyDown" {
        if let Some(text) = &key.text {
            params["text"] = json!(text);
            params["unmodifiedText"] = json!(text);
        }
    }
    InputEvent::Key(params)
}

fn dom_keys(keys: &[String]) -> Result<Vec<DomKey>, String> {
    keys.iter().map(|name| dom_key(name)).collect()
}

fn enter() -> DomKey {
    DomKey { key: "Enter".into(), code: "Enter".into(), key_code: 13, modifier: 0, text: Some("\r".into()) }
}

/// A key name (`ctrl`, `Return`, `a`, `F5`) as the DOM names the key.
fn dom_key(name: &str) -> Result<DomKey, String> {
    let keysym = keyboard::lookup(name).ok_or_else(|| format!("unknown key {name:?}"))?;
    let named = |key: &str, code: &str, key_code: u32, modifier: u32| DomKey {
        key: key.into(),
        code: code.into(),
        key_code,
        modifier,
        text: None,
    };
    Ok(match keysym.name.as_str() {
        "Return" | "KP_Enter" => enter(),
        "Tab" => DomKey { text: None, ..named("Tab", "Tab", 9, 0) },
        "BackSpace" => named("Backspace", "Backspace", 8, 0),
        "Escape" => named("Escape", "Escape", 27, 0),
        "Delete" => named("Delete", "Delete", 46, 0),
        "Insert" => named("Insert", "Insert", 45, 0),
        "Home" => named("Home", "Home", 36, 0),
        "End" => named("End", "End", 35, 0),
        "Prior" => named("PageUp", "PageUp", 33, 0),
        "Next" => named("PageDown", "PageDown", 34, 0),
        "Up" => named("ArrowUp", "ArrowUp", 38, 0),
        "Down" => named("ArrowDown", "ArrowDown", 40, 0),
        "Left" => named("ArrowLeft", "ArrowLeft", 37, 0),
        "Right" => named("ArrowRight", "ArrowRight", 39, 0),
        "Control_L" => named("Control", "ControlLeft", 17, 2),
        "Control_R" => named("Control", "ControlRight", 17, 2),
        "Shift_L" => named("Shift", "ShiftLeft", 16, 8),
        "Shift_R" => named("Shift", "ShiftRight", 16, 8),
        "Alt_L" => named("Alt", "AltLeft", 18, 1),
        "Alt_R" => named("Alt", "AltRight", 18, 1),
        "Super_L" | "Super_R" => named("Meta", "MetaLeft", 91, 4),
        "space" => DomKey { text: Some(" ".into()), ..named(" ", "Space", 32, 0) },
        other => match function_key(other) {
            Some(n) => named(other, other, 111 + n, 0),
            None => printable(keysym.value).ok_or_else(|| format!("the browser cannot press key {name:?}"))?,
        },
    })
}

/// `F1`..`F24` as their number.
fn function_key(name: &str) -> Option<u32> {
    name.strip_prefix('F').and_then(|n| n.parse().ok()).filter(|n| (1..=24).contains(n))
}

/// A printable ASCII key by its keysym value (which is its character).
fn printable(value: u32) -> Option<DomKey> {
    let c = char::from_u32(value).filter(|c| c.is_ascii_graphic())?;
    let upper = c.to_ascii_uppercase();
    let (code, key_code) = match c {
        'a'..='z' | 'A'..='Z' => (format!("Key{upper}"), u32::from(upper)),
        '0'..='9' => (format!("Digit{c}"), u32::from(c)),
        _ => (String::new(), 0),
    };
    Some(DomKey { key: c.to_string(), code, key_code, modifier: 0, text: Some(c.to_string()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn enter_inserts_a_carriage_return_so_a_form_submits() {
        let events = events(&Action::Keypress { keys: keys(&["Return"]) }, (0, 0)).expect("known key");
        let InputEvent::Key(down) = &events[0] else { panic!("a key event") };
        assert_eq!(
            (down["type"].as_str(), down["key"].as_str(), down["text"].as_str()),
            (Some("keyDown"), Some("Enter"), Some("\r"))
        );
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn a_chord_holds_its_modifiers_and_inserts_nothing() {
        let events = events(&Action::Keypress { keys: keys(&["ctrl", "a"]) }, (0, 0)).expect("known keys");
        let kinds: Vec<_> = events
            .iter()
            .map(|e| match e {
                InputEvent::Key(p) => (p["type"].as_str().unwrap_or_default().to_owned(), p["modifiers"].as_u64()),
                _ => panic!("key events only"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                ("rawKeyDown".into(), Some(2)),
                ("rawKeyDown".into(), Some(2)),
                ("keyUp".into(), Some(2)),
                ("keyUp".into(), Some(0))
            ]
        );
    }

    #[test]
    fn a_double_click_counts_its_clicks_and_typing_presses_enter_for_newlines() {
        let clicks = events(&Action::DoubleClick { x: 5, y: 6 }, (0, 0)).expect("click");
        assert_eq!(clicks.len(), 5);
        let typed = events(&Action::Type { text: "a\nb".into() }, (0, 0)).expect("type");
        assert!(
            matches!(&typed[..], [InputEvent::Text(a), InputEvent::Key(_), InputEvent::Key(_), InputEvent::Text(b)] if a == "a" && b == "b")
        );
    }
}
