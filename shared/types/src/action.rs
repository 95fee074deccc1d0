//! The provider-neutral actions a pipeline performs on a sandbox, in the
//! sandbox's own screen coordinates. The vocabulary is the public one of the
//! contract, tagged by `type` as in the OpenAI computer tool.

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;

/// The largest coordinate any supported screen has.
const MAX_COORDINATE: u32 = 16_384;
/// The longest single wait: ten minutes.
const MAX_WAIT_MS: u64 = 600_000;
const MAX_TYPED_CHARS: usize = 20_000;
const MAX_KEYS: usize = 8;
const MAX_DRAG_POINTS: usize = 1_000;
const MAX_CONFIRM_CHARS: usize = 1_000;

/// A mouse button.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum MouseButton {
    #[default]
    Left,
    Right,
    Middle,
}

/// One thing to do on a screen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Action {
    Click {
        x: u32,
        y: u32,
        #[serde(default)]
        button: MouseButton,
    },
    DoubleClick {
        x: u32,
        y: u32,
    },
    TripleClick {
        x: u32,
        y: u32,
    },
    Move {
        x: u32,
        y: u32,
    },
    Drag {
        path: Vec<[u32; 2]>,
    },
    Scroll {
        x: u32,
        y: u32,
        #[serde(default)]
        scroll_x: i32,
        #[serde(default)]
        scroll_y: i32,
    },
    Type {
        text: String,
    },
    Keypress {
        keys: Vec<String>,
    },
    Wait {
        ms: u64,
    },
    // A struct variant, not a unit one, so that other fields are refused
    // here as on every other action (serde ignores them on a unit variant).
    Screenshot {},
    /// Presses a mouse button where the pointer is and keeps it down.
    MouseDown {
        #[serde(default)]
        button: MouseButton,
    },
    /// Releases a mouse button pressed with `mouse_down`.
    MouseUp {
        #[serde(default)]
        button: MouseButton,
    },
    /// Presses keys and keeps them down (modifiers held across clicks).
    KeyDown {
        keys: Vec<String>,
    },
    /// Releases keys pressed with `key_down`, in reverse order.
    KeyUp {
        keys: Vec<String>,
    },
    /// A sensitive step of a scripted task: nothing is done on the screen,
    /// but the task goes past it only as its `sensitive_actions` says (with
    /// `pause`, the default, it waits, code `sensitive-action`, until a
    /// person approves; a denial fails it).
    Confirm {
        message: String,
    },
}

impl Action {
    /// Checks the limits serde cannot express.
    pub fn validate(&self) -> Result<(), ValidationError> {
        match self {
            Action::Click { x, y, .. }
            | Action::DoubleClick { x, y }
            | Action::TripleClick { x, y }
            | Action::Move { x, y }
            | Action::Scroll { x, y, .. } => check_point(*x, *y),
            Action::Drag { path } => {
                if path.len() < 2 || path.len() > MAX_DRAG_POINTS {
                    return Err(ValidationError::at("path", format!("a drag needs 2 to {MAX_DRAG_POINTS} points")));
                }
                path.iter().try_for_each(|[x, y]| check_point(*x, *y))
            }
            Action::Type { text } if text.is_empty() || text.chars().count() > MAX_TYPED_CHARS => {
                Err(ValidationError::at("text", format!("text must be 1 to {MAX_TYPED_CHARS} characters")))
            }
            Action::Keypress { keys } | Action::KeyDown { keys } | Action::KeyUp { keys }
                if keys.is_empty() || keys.len() > MAX_KEYS || keys.iter().any(|k| !is_key_name(k)) =>
            {
                Err(ValidationError::at("keys", format!("keys must be 1 to {MAX_KEYS} key names like \"ctrl\" or \"a\"")))
            }
            Action::Wait { ms } if *ms > MAX_WAIT_MS => {
                Err(ValidationError::at("ms", format!("a wait is at most {MAX_WAIT_MS} ms")))
            }
            Action::Confirm { message } if message.trim().is_empty() || message.chars().count() > MAX_CONFIRM_CHARS => {
                Err(ValidationError::at("message", format!("message must be 1 to {MAX_CONFIRM_CHARS} characters")))
            }
            _ => Ok(()),
        }
    }

    /// The action's `type`, as the contract spells it: for span fields and
    /// metric labels.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Click { .. } => "click",
            Action::DoubleClick { .. } => "double_click",
            Action::TripleClick { .. } => "triple_click",
            Action::Move { .. } => "move",
            Action::Drag { .. } => "drag",
            Action::Scroll { .. } => "scroll",
            Action::Type { .. } => "type",
            Action::Keypress { .. } => "keypress",
            Action::Wait { .. } => "wait",
            Action::Screenshot {} => "screenshot",
            Action::MouseDown { .. } => "mouse_down",
            Action::MouseUp { .. } => "mouse_up",
            Action::KeyDown { .. } => "key_down",
            Action::KeyUp { .. } => "key_up",
            Action::Confirm { .. } => "confirm",
        }
    }

    /// Whether this action needs a screen to act on.
    pub fn needs_sandbox(&self) -> bool {
        !matches!(self, Action::Wait { .. } | Action::Confirm { .. })
    }
}

fn check_point(x: u32, y: u32) -> Result<(), ValidationError> {
    if x > MAX_COORDINATE || y > MAX_COORDINATE {
        return Err(ValidationError::new(format!("coordinates must be at most {MAX_COORDINATE}")));
    }
    Ok(())
}

fn is_key_name(key: &str) -> bool {
    !key.is_empty() && key.len() <= 32 && key.chars().all(|c| c.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Action, serde_json::Error> {
        serde_json::from_str(json)
    }

    #[test]
    fn contract_examples_parse() {
        assert_eq!(
            parse(r#"{"type": "click", "x": 10, "y": 20, "button": "left"}"#).expect("click"),
            Action::Click { x: 10, y: 20, button: MouseButton::Left }
        );
        assert_eq!(parse(r#"{"type": "wait", "ms": 500}"#).expect("wait"), Action::Wait { ms: 500 });
        assert_eq!(parse(r#"{"type": "screenshot"}"#).expect("screenshot"), Action::Screenshot {});
        assert!(parse(r#"{"type": "drag", "path": [[1, 2], [3, 4]]}"#).is_ok());
        assert!(parse(r#"{"type": "screenshot", "x": 1}"#).is_err(), "other fields are refused");
        assert_eq!(serde_json::to_value(Action::Screenshot {}).expect("json"), serde_json::json!({"type": "screenshot"}));
        assert!(parse(r#"{"type": "keypress", "keys": ["ctrl", "a"]}"#).is_ok());
    }

    #[test]
    fn held_buttons_and_keys_parse() {
        assert_eq!(parse(r#"{"type": "mouse_down"}"#).expect("down"), Action::MouseDown { button: MouseButton::Left });
        assert_eq!(
            parse(r#"{"type": "mouse_up", "button": "right"}"#).expect("up"),
            Action::MouseUp { button: MouseButton::Right }
        );
        assert_eq!(
            parse(r#"{"type": "key_down", "keys": ["shift"]}"#).expect("key down"),
            Action::KeyDown { keys: vec!["shift".into()] }
        );
        assert!(parse(r#"{"type": "triple_click", "x": 1, "y": 2}"#).is_ok());
        assert!(Action::KeyUp { keys: vec![] }.validate().is_err());
    }

    #[test]
    fn kinds_are_the_wire_types() {
        let examples = [
            r#"{"type": "click", "x": 1, "y": 2}"#,
            r#"{"type": "double_click", "x": 1, "y": 2}"#,
            r#"{"type": "triple_click", "x": 1, "y": 2}"#,
            r#"{"type": "move", "x": 1, "y": 2}"#,
            r#"{"type": "drag", "path": [[1, 2], [3, 4]]}"#,
            r#"{"type": "scroll", "x": 1, "y": 2}"#,
            r#"{"type": "type", "text": "hi"}"#,
            r#"{"type": "keypress", "keys": ["a"]}"#,
            r#"{"type": "wait", "ms": 1}"#,
            r#"{"type": "screenshot"}"#,
            r#"{"type": "mouse_down"}"#,
            r#"{"type": "mouse_up"}"#,
            r#"{"type": "key_down", "keys": ["a"]}"#,
            r#"{"type": "key_up", "keys": ["a"]}"#,
            r#"{"type": "confirm", "message": "place the order"}"#,
        ];
        for json in examples {
            let action = parse(json).expect("parses");
            let wire = serde_json::to_value(&action).expect("serializes");
            assert_eq!(wire["type"], action.kind(), "{json}");
        }
    }

    #[test]
    fn unknown_types_and_fields_are_refused() {
        assert!(parse(r#"{"type": "teleport"}"#).is_err());
        assert!(parse(r#"{"type": "wait", "ms": 5, "extra": 1}"#).is_err());
        assert!(parse(r#"{"type": "click", "x": -1, "y": 0}"#).is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(Action::Wait { ms: MAX_WAIT_MS + 1 }.validate().is_err());
        assert!(Action::Drag { path: vec![[1, 1]] }.validate().is_err());
        assert!(Action::Keypress { keys: vec![] }.validate().is_err());
        assert!(Action::Click { x: 99_999, y: 1, button: MouseButton::Left }.validate().is_err());
        assert!(Action::Type { text: "hello".into() }.validate().is_ok());
        assert!(Action::Confirm { message: " ".into() }.validate().is_err());
        assert!(Action::Confirm { message: "x".repeat(MAX_CONFIRM_CHARS + 1) }.validate().is_err());
    }

    #[test]
    fn a_confirmation_needs_no_sandbox() {
        let confirm = parse(r#"{"type": "confirm", "message": "send the payment"}"#).expect("confirm");
        assert!(confirm.validate().is_ok());
        assert!(!confirm.needs_sandbox());
        assert!(parse(r#"{"type": "confirm"}"#).is_err(), "a confirmation says what it confirms");
    }
}
