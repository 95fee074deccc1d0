//! OpenAI's computer actions in our vocabulary. Both tool generations share
//! one action shape (`click`, `double_click`, `drag`, `keypress`, `move`,
//! `screenshot`, `scroll`, `type`, `wait`), so one mapping serves both. Keys
//! a pointer action holds (`keys`) become a `key_down` before it and a
//! `key_up` after it; scroll distances in pixels become wheel clicks; key
//! names become the ones our sandboxes press (`sandbox::keyboard::lookup`).

use flotilla_types::action::{Action, MouseButton};

use super::json::At;
use crate::model::{ModelAction, ModelError};
use crate::sandbox::keyboard;

/// OpenAI scroll distances are pixels (its browser driver passes them to
/// `window.scrollBy`); our scroll counts wheel clicks. One click scrolls
/// about 100 pixels in Chromium on Windows and about 50 to 120 elsewhere, so
/// a distance is divided by 100 and rounded, and any distance that is not
/// zero scrolls at least one click.
pub const PIXELS_PER_WHEEL_CLICK: i64 = 100;

/// How long a `wait` waits when the action does not say (`ms`): OpenAI's
/// own sample waits one second.
pub const DEFAULT_WAIT_MS: u64 = 1_000;

/// OpenAI's key names (matched in any case) and ours, where they differ or
/// where a short canonical name reads better in events. Every other name is
/// passed on as written when our sandboxes know it (`F5`, `a`, `/`).
const KEY_NAMES: &[(&str, &str)] = &[
    ("ctrl", "ctrl"),
    ("control", "ctrl"),
    ("shift", "shift"),
    ("alt", "alt"),
    ("option", "alt"),
    ("cmd", "super"),
    ("command", "super"),
    ("meta", "super"),
    ("super", "super"),
    ("win", "super"),
    ("enter", "enter"),
    ("return", "enter"),
    ("esc", "esc"),
    ("escape", "esc"),
    ("tab", "tab"),
    ("space", "space"),
    ("backspace", "backspace"),
    ("delete", "delete"),
    ("insert", "insert"),
    ("home", "home"),
    ("end", "end"),
    ("pageup", "pageup"),
    ("pagedown", "pagedown"),
    ("arrowup", "up"),
    ("arrowdown", "down"),
    ("arrowleft", "left"),
    ("arrowright", "right"),
    ("capslock", "capslock"),
];

/// The steps one OpenAI action asks for, in order.
pub fn model_actions(action: &At<'_>) -> Result<Vec<ModelAction>, ModelError> {
    let kind = action.field("type")?;
    let act = match kind.str()? {
        "click" => Action::Click { x: x(action)?, y: y(action)?, button: button(action)? },
        "double_click" => Action::DoubleClick { x: x(action)?, y: y(action)? },
        "move" => Action::Move { x: x(action)?, y: y(action)? },
        "drag" => Action::Drag { path: drag_path(&action.field("path")?)? },
        "scroll" => Action::Scroll {
            x: x(action)?,
            y: y(action)?,
            scroll_x: scroll_clicks(action, "scroll_x")?,
            scroll_y: scroll_clicks(action, "scroll_y")?,
        },
        "type" => Action::Type { text: action.field("text")?.str()?.to_owned() },
        "keypress" => Action::Keypress { keys: key_names(&action.field("keys")?)? },
        "wait" => Action::Wait { ms: action.get("ms").map(|ms| ms.count()).transpose()?.unwrap_or(DEFAULT_WAIT_MS) },
        "screenshot" => Action::Screenshot {},
        _ => return Err(kind.wrong("is not an action type we know")),
    };
    check_limits(&act, action)?;
    let held = if is_pointer_action(&act) { held_keys(action)? } else { Vec::new() };
    Ok(holding(held, act))
}

fn x(action: &At<'_>) -> Result<u32, ModelError> {
    action.field("x")?.coordinate()
}

fn y(action: &At<'_>) -> Result<u32, ModelError> {
    action.field("y")?.coordinate()
}

/// The clicked button; `wheel` is the middle button. `back` and `forward`
/// have no counterpart on our sandboxes and are refused. Absent means left.
fn button(action: &At<'_>) -> Result<MouseButton, ModelError> {
    let Some(button) = action.get("button") else {
        return Ok(MouseButton::Left);
    };
    match button.str()? {
        "left" => Ok(MouseButton::Left),
        "right" => Ok(MouseButton::Right),
        "wheel" | "middle" => Ok(MouseButton::Middle),
        "back" | "forward" => Err(button.wrong("is a browser history button, which our sandboxes cannot click")),
        _ => Err(button.wrong("is not a mouse button we know")),
    }
}

/// A drag's path: a list of `{x, y}` points.
fn drag_path(path: &At<'_>) -> Result<Vec<[u32; 2]>, ModelError> {
    path.items()?.iter().map(|point| Ok([x(point)?, y(point)?])).collect()
}

/// A scroll distance in pixels as wheel clicks; absent is no scroll.
fn scroll_clicks(action: &At<'_>, name: &str) -> Result<i32, ModelError> {
    let pixels = action.get(name).map(|p| p.int()).transpose()?.unwrap_or(0);
    Ok(wheel_clicks(pixels))
}

/// Pixels to wheel clicks, rounded to the nearest click but never to zero.
pub fn wheel_clicks(pixels: i64) -> i32 {
    if pixels == 0 {
        return 0;
    }
    let clicks =
        ((pixels.unsigned_abs() + PIXELS_PER_WHEEL_CLICK.unsigned_abs() / 2) / PIXELS_PER_WHEEL_CLICK.unsigned_abs()).max(1);
    let clicks = i32::try_from(clicks).unwrap_or(i32::MAX);
    if pixels < 0 {
        -clicks
    } else {
        clicks
    }
}

/// The names of a list of keys, each mapped to one our sandboxes press.
fn key_names(keys: &At<'_>) -> Result<Vec<String>, ModelError> {
    let mut names = Vec::new();
    for key in keys.items()? {
        for part in split_chord(key.str()?) {
            names.push(key_name(part).ok_or_else(|| key.wrong("is not a key we know"))?);
        }
    }
    Ok(names)
}

/// Our name for one OpenAI key name, or `None` when no sandbox knows it.
pub fn key_name(openai: &str) -> Option<String> {
    let folded = openai.to_ascii_lowercase();
    if let Some((_, ours)) = KEY_NAMES.iter().find(|(theirs, _)| *theirs == folded) {
        return Some((*ours).to_owned());
    }
    keyboard::lookup(openai).map(|_| openai.to_owned())
}

/// `"ctrl+c"` written as one key is two; `"+"` alone is the plus key.
fn split_chord(key: &str) -> Vec<&str> {
    if key.len() > 1 && key.contains('+') {
        key.split('+').filter(|part| !part.is_empty()).collect()
    } else {
        vec![key]
    }
}

/// The keys held during a pointer action (`keys`, absent when none).
fn held_keys(action: &At<'_>) -> Result<Vec<String>, ModelError> {
    action.get("keys").map(|keys| key_names(&keys)).transpose().map(Option::unwrap_or_default)
}

fn is_pointer_action(action: &Action) -> bool {
    matches!(
        action,
        Action::Click { .. } | Action::DoubleClick { .. } | Action::Move { .. } | Action::Drag { .. } | Action::Scroll { .. }
    )
}

/// `act` alone, or between pressing and releasing `held`.
fn holding(held: Vec<String>, act: Action) -> Vec<ModelAction> {
    if held.is_empty() {
        return vec![ModelAction::Act(act)];
    }
    vec![
        ModelAction::Act(Action::KeyDown { keys: held.clone() }),
        ModelAction::Act(act),
        ModelAction::Act(Action::KeyUp { keys: held }),
    ]
}

/// The limits of our vocabulary (text length, key count, drag points), as
/// a malformed answer naming the field.
fn check_limits(act: &Action, action: &At<'_>) -> Result<(), ModelError> {
    act.validate().map_err(|e| {
        let field = e.field.map(|f| format!(".{f}")).unwrap_or_default();
        ModelError::Malformed(format!("{}{field}: {}", action.path(), e.message))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn map(action: Value) -> Result<Vec<ModelAction>, ModelError> {
        let answer = json!({ "action": action });
        model_actions(&At::root(&answer).field("action")?)
    }

    fn acts(action: Value) -> Vec<Action> {
        map(action)
            .expect("maps")
            .into_iter()
            .map(|a| match a {
                ModelAction::Act(act) => act,
                other => panic!("not a screen action: {other:?}"),
            })
            .collect()
    }

    fn malformed(action: Value) -> String {
        match map(action) {
            Err(ModelError::Malformed(message)) => message,
            other => panic!("expected a malformed answer, got {other:?}"),
        }
    }

    fn strings(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn openai_key_names_become_ours() {
        for (theirs, ours) in [
            ("CTRL", "ctrl"),
            ("ENTER", "enter"),
            ("ARROWLEFT", "left"),
            ("ArrowDown", "down"),
            ("ESC", "esc"),
            ("CMD", "super"),
            ("META", "super"),
            ("OPTION", "alt"),
            ("PAGEDOWN", "pagedown"),
            ("F5", "F5"),
            ("a", "a"),
            ("/", "/"),
        ] {
            assert_eq!(key_name(theirs).as_deref(), Some(ours), "{theirs}");
            assert!(keyboard::lookup(ours).is_some(), "{ours} must be pressable");
        }
        assert_eq!(key_name("HYPERDRIVE"), None);
    }

    #[test]
    fn keypress_maps_a_chord() {
        assert_eq!(
            acts(json!({"type": "keypress", "keys": ["CTRL", "SHIFT", "T"]})),
            [Action::Keypress { keys: strings(&["ctrl", "shift", "T"]) }]
        );
        assert_eq!(acts(json!({"type": "keypress", "keys": ["ctrl+c"]})), [Action::Keypress { keys: strings(&["ctrl", "c"]) }]);
        assert_eq!(
            malformed(json!({"type": "keypress", "keys": ["CTRL", "WARP"]})),
            "action.keys[1] is not a key we know: \"WARP\""
        );
        assert_eq!(
            malformed(json!({"type": "keypress", "keys": []})),
            "action.keys: keys must be 1 to 8 key names like \"ctrl\" or \"a\""
        );
    }

    #[test]
    fn pointer_actions_map() {
        assert_eq!(
            acts(json!({"type": "click", "x": 5, "y": 6, "button": "wheel"})),
            [Action::Click { x: 5, y: 6, button: MouseButton::Middle }]
        );
        assert_eq!(acts(json!({"type": "click", "x": 5, "y": 6})), [Action::Click { x: 5, y: 6, button: MouseButton::Left }]);
        assert_eq!(acts(json!({"type": "double_click", "x": 1, "y": 2})), [Action::DoubleClick { x: 1, y: 2 }]);
        assert_eq!(acts(json!({"type": "move", "x": 3, "y": 4})), [Action::Move { x: 3, y: 4 }]);
        assert_eq!(
            acts(json!({"type": "drag", "path": [{"x": 1, "y": 2}, {"x": 3, "y": 4}]})),
            [Action::Drag { path: vec![[1, 2], [3, 4]] }]
        );
    }

    #[test]
    fn held_keys_surround_a_pointer_action() {
        assert_eq!(
            acts(json!({"type": "click", "x": 5, "y": 6, "button": "left", "keys": ["SHIFT"]})),
            [
                Action::KeyDown { keys: strings(&["shift"]) },
                Action::Click { x: 5, y: 6, button: MouseButton::Left },
                Action::KeyUp { keys: strings(&["shift"]) },
            ]
        );
        assert_eq!(acts(json!({"type": "move", "x": 1, "y": 1, "keys": []})), [Action::Move { x: 1, y: 1 }]);
    }

    #[test]
    fn other_actions_map() {
        assert_eq!(acts(json!({"type": "type", "text": "hi"})), [Action::Type { text: "hi".into() }]);
        assert_eq!(acts(json!({"type": "wait"})), [Action::Wait { ms: DEFAULT_WAIT_MS }]);
        assert_eq!(acts(json!({"type": "wait", "ms": 250})), [Action::Wait { ms: 250 }]);
        assert_eq!(acts(json!({"type": "screenshot"})), [Action::Screenshot {}]);
        assert_eq!(
            acts(json!({"type": "scroll", "x": 10, "y": 20, "scroll_x": 0, "scroll_y": -300})),
            [Action::Scroll { x: 10, y: 20, scroll_x: 0, scroll_y: -3 }]
        );
    }

    #[test]
    fn scroll_pixels_round_to_wheel_clicks() {
        assert_eq!(wheel_clicks(0), 0);
        assert_eq!(wheel_clicks(1), 1);
        assert_eq!(wheel_clicks(-20), -1);
        assert_eq!(wheel_clicks(149), 1);
        assert_eq!(wheel_clicks(150), 2);
        assert_eq!(wheel_clicks(-600), -6);
        assert_eq!(wheel_clicks(i64::MIN), i32::MIN + 1);
    }

    #[test]
    fn bad_actions_are_malformed_and_name_the_field() {
        assert_eq!(malformed(json!({"type": "click", "y": 6, "button": "left"})), "action.x is missing");
        assert_eq!(malformed(json!({"type": "teleport"})), "action.type is not an action type we know: \"teleport\"");
        assert_eq!(
            malformed(json!({"type": "click", "x": 1, "y": 1, "button": "back"})),
            "action.button is a browser history button, which our sandboxes cannot click: \"back\""
        );
        assert_eq!(malformed(json!({"type": "drag", "path": [[1, 2], [3, 4]]})), "action.path[0].x is missing");
        assert_eq!(malformed(json!({"type": "type", "text": 5})), "action.text is not a string: 5");
        assert_eq!(malformed(json!({"type": "wait", "ms": -1})), "action.ms is negative: -1");
        assert_eq!(malformed(json!({"action": "click"})), "action.type is missing");
    }
}
