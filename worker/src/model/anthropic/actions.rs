//! The computer tool's actions as ours. Each `tool_use` input names one
//! action and its parameters; it becomes one or more [`ModelAction`]s in
//! the model's coordinates:
//!
//! | tool action | ours |
//! |---|---|
//! | `screenshot` | `Screenshot` |
//! | `left_click`, `right_click`, `middle_click` | `Click` with that button |
//! | `double_click`, `triple_click` | `DoubleClick`, `TripleClick` |
//! | `mouse_move` | `Move` |
//! | `left_click_drag` | `Drag` from `start_coordinate` to `coordinate` |
//! | `left_mouse_down`, `left_mouse_up` | `MouseDown`, `MouseUp` (after a `Move` when a coordinate is given) |
//! | `scroll` | `Scroll`, `scroll_amount` wheel clicks in `scroll_direction` |
//! | `type` | `Type` |
//! | `key` | `Keypress` for each chord of the xdotool sequence |
//! | `hold_key` | `KeyDown`, `Wait` for `duration` seconds, `KeyUp` |
//! | `wait` | `Wait` for `duration` seconds |
//! | `cursor_position` | [`ModelAction::CursorPosition`] |
//! | `zoom` | [`ModelAction::Zoom`] (not with `computer_20250124`) |
//!
//! The older tools name the action in the input's `action`; the toolset's
//! member tools are named after it, with the same parameters (and `key`'s
//! `repeat`, the chords that many times).
//!
//! A click, drag or scroll with modifier keys in `text` (`"shift"`,
//! `"ctrl+shift"`) holds them around it: `KeyDown`, the action, `KeyUp`.
//! A click without a coordinate presses and releases where the pointer is;
//! a drag without `start_coordinate` starts there. A scroll without a
//! coordinate scrolls where the model's own actions last left the pointer.
//! A missing or wrong parameter is [`ModelError::Malformed`], naming it.

use flotilla_types::action::{Action, MouseButton};
use serde_json::{Map, Value};

use super::{xdotool, ComputerTool};
use crate::model::{ModelAction, ModelError};

/// Where the model's actions last left the pointer, when known.
pub(super) type Pointer = Option<[u32; 2]>;

/// The actions `action` with `input` asks for; `pointer` follows them.
/// `at` is the input's place in the answer, like `content[1].input`.
pub(super) fn translate(
    action: &str,
    input: &Map<String, Value>,
    at: &str,
    tool: ComputerTool,
    display: (u32, u32),
    pointer: &mut Pointer,
) -> Result<Vec<ModelAction>, ModelError> {
    let fields = Fields { input, at, display };
    let actions = match action {
        "screenshot" => vec![ModelAction::Act(Action::Screenshot {})],
        "left_click" => fields.click(Clicks::Single(MouseButton::Left))?,
        "right_click" => fields.click(Clicks::Single(MouseButton::Right))?,
        "middle_click" => fields.click(Clicks::Single(MouseButton::Middle))?,
        "double_click" => fields.click(Clicks::Double)?,
        "triple_click" => fields.click(Clicks::Triple)?,
        "mouse_move" => fields.mouse_move()?,
        "left_click_drag" => fields.drag()?,
        "left_mouse_down" => fields.press(Action::MouseDown { button: MouseButton::Left })?,
        "left_mouse_up" => fields.press(Action::MouseUp { button: MouseButton::Left })?,
        "scroll" => fields.scroll(*pointer)?,
        "type" => fields.type_text()?,
        "key" => fields.key()?,
        "hold_key" => fields.hold_key()?,
        "wait" => fields.wait()?,
        "cursor_position" => vec![ModelAction::CursorPosition],
        "zoom" if tool.zooms() => fields.zoom()?,
        "zoom" => return Err(fields.bad("action", format!("zoom is not offered by {}", tool.tool_type()))),
        other => return Err(fields.bad("action", format!("{other:?} is not an action of the computer tool"))),
    };
    check_limits(&actions, at)?;
    *pointer = pointer_after(&actions, *pointer);
    Ok(actions)
}

/// Which click a click action is.
#[derive(Clone, Copy)]
enum Clicks {
    Single(MouseButton),
    Double,
    Triple,
}

/// The parameters of one tool input, read with errors that name them.
struct Fields<'a> {
    input: &'a Map<String, Value>,
    at: &'a str,
    display: (u32, u32),
}

impl Fields<'_> {
    fn click(&self, clicks: Clicks) -> Result<Vec<ModelAction>, ModelError> {
        let action = match (self.optional_point("coordinate")?, clicks) {
            (Some([x, y]), Clicks::Single(button)) => vec![Action::Click { x, y, button }],
            (Some([x, y]), Clicks::Double) => vec![Action::DoubleClick { x, y }],
            (Some([x, y]), Clicks::Triple) => vec![Action::TripleClick { x, y }],
            (None, Clicks::Single(button)) => press_and_release(button, 1),
            (None, Clicks::Double) => press_and_release(MouseButton::Left, 2),
            (None, Clicks::Triple) => press_and_release(MouseButton::Left, 3),
        };
        Ok(held(self.modifiers()?, action))
    }

    fn mouse_move(&self) -> Result<Vec<ModelAction>, ModelError> {
        let [x, y] = self.point("coordinate")?;
        Ok(vec![ModelAction::Act(Action::Move { x, y })])
    }

    fn drag(&self) -> Result<Vec<ModelAction>, ModelError> {
        let end = self.point("coordinate")?;
        let steps = match self.optional_point("start_coordinate")? {
            Some(start) => vec![Action::Drag { path: vec![start, end] }],
            None => vec![
                Action::MouseDown { button: MouseButton::Left },
                Action::Move { x: end[0], y: end[1] },
                Action::MouseUp { button: MouseButton::Left },
            ],
        };
        Ok(held(self.modifiers()?, steps))
    }

    /// A button press or release, moving there first when told where.
    fn press(&self, action: Action) -> Result<Vec<ModelAction>, ModelError> {
        let mut steps = Vec::with_capacity(2);
        if let Some([x, y]) = self.optional_point("coordinate")? {
            steps.push(ModelAction::Act(Action::Move { x, y }));
        }
        steps.push(ModelAction::Act(action));
        Ok(steps)
    }

    fn scroll(&self, pointer: Pointer) -> Result<Vec<ModelAction>, ModelError> {
        let [x, y] = match self.optional_point("coordinate")? {
            Some(point) => point,
            None => pointer.ok_or_else(|| self.bad("coordinate", "must be [x, y] while the pointer has not been placed"))?,
        };
        let amount = self.wheel_clicks("scroll_amount")?;
        let (scroll_x, scroll_y) = match self.string("scroll_direction")? {
            "up" => (0, -amount),
            "down" => (0, amount),
            "left" => (-amount, 0),
            "right" => (amount, 0),
            _ => return Err(self.bad("scroll_direction", "must be up, down, left or right")),
        };
        Ok(held(self.modifiers()?, vec![Action::Scroll { x, y, scroll_x, scroll_y }]))
    }

    fn type_text(&self) -> Result<Vec<ModelAction>, ModelError> {
        let text = self.string("text")?;
        if text.is_empty() {
            return Err(self.bad("text", "must not be empty"));
        }
        Ok(vec![ModelAction::Act(Action::Type { text: text.to_owned() })])
    }

    /// The chords of `text`, `repeat` times over (the toolset's `key`
    /// takes 1 to 100; absent is once).
    fn key(&self) -> Result<Vec<ModelAction>, ModelError> {
        let chords = self.key_sequence("text")?;
        let repeat = match self.input.get("repeat").filter(|v| !v.is_null()) {
            None => 1,
            Some(value) => {
                whole_number(value).filter(|n| (1..=100).contains(n)).ok_or_else(|| self.bad("repeat", "must be 1 to 100"))?
            }
        };
        let once: Vec<ModelAction> = chords.into_iter().map(|keys| ModelAction::Act(Action::Keypress { keys })).collect();
        Ok((0..repeat).flat_map(|_| once.iter().cloned()).collect())
    }

    fn hold_key(&self) -> Result<Vec<ModelAction>, ModelError> {
        let keys: Vec<String> = self.key_sequence("text")?.into_iter().flatten().collect();
        let ms = self.milliseconds("duration")?;
        Ok(vec![
            ModelAction::Act(Action::KeyDown { keys: keys.clone() }),
            ModelAction::Act(Action::Wait { ms }),
            ModelAction::Act(Action::KeyUp { keys }),
        ])
    }

    fn wait(&self) -> Result<Vec<ModelAction>, ModelError> {
        Ok(vec![ModelAction::Act(Action::Wait { ms: self.milliseconds("duration")? })])
    }

    fn zoom(&self) -> Result<Vec<ModelAction>, ModelError> {
        let [x1, y1, x2, y2] = self.region("region")?;
        Ok(vec![ModelAction::Zoom { region: [x1, y1, x2, y2] }])
    }

    /// The modifier keys to hold, from the optional `text`.
    fn modifiers(&self) -> Result<Option<Vec<String>>, ModelError> {
        match self.input.get("text") {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) if text.trim().is_empty() => Ok(None),
            Some(_) => Ok(Some(self.key_sequence("text")?.into_iter().flatten().collect())),
        }
    }

    fn key_sequence(&self, name: &str) -> Result<Vec<Vec<String>>, ModelError> {
        xdotool::sequence(self.string(name)?).map_err(|problem| self.bad(name, problem))
    }

    fn string(&self, name: &str) -> Result<&str, ModelError> {
        self.input.get(name).and_then(Value::as_str).ok_or_else(|| self.bad(name, "must be a string"))
    }

    fn point(&self, name: &str) -> Result<[u32; 2], ModelError> {
        self.optional_point(name)?.ok_or_else(|| self.bad(name, "must be [x, y]"))
    }

    /// A point on the display, or `None` when the field is absent.
    fn optional_point(&self, name: &str) -> Result<Option<[u32; 2]>, ModelError> {
        let Some(value) = self.input.get(name).filter(|v| !v.is_null()) else {
            return Ok(None);
        };
        let [x, y] = whole_numbers(value).ok_or_else(|| self.bad(name, "must be [x, y]"))?;
        let (width, height) = self.display;
        if x >= width || y >= height {
            return Err(self.bad(name, format!("[{x}, {y}] is outside the {width}x{height} display")));
        }
        Ok(Some([x, y]))
    }

    /// `[x1, y1, x2, y2]`: a non-empty rectangle on the display.
    fn region(&self, name: &str) -> Result<[u32; 4], ModelError> {
        let value = self.input.get(name).unwrap_or(&Value::Null);
        let [x1, y1, x2, y2] = whole_numbers(value).ok_or_else(|| self.bad(name, "must be [x1, y1, x2, y2]"))?;
        let (width, height) = self.display;
        if x1 >= x2 || y1 >= y2 || x2 > width || y2 > height {
            return Err(self.bad(name, format!("must be a rectangle inside the {width}x{height} display, top left first")));
        }
        Ok([x1, y1, x2, y2])
    }

    fn wheel_clicks(&self, name: &str) -> Result<i32, ModelError> {
        self.input
            .get(name)
            .and_then(whole_number)
            .and_then(|n| i32::try_from(n).ok())
            .ok_or_else(|| self.bad(name, "must be a whole number of wheel clicks"))
    }

    /// A duration in seconds, as whole milliseconds.
    fn milliseconds(&self, name: &str) -> Result<u64, ModelError> {
        let seconds = self.input.get(name).and_then(Value::as_f64).filter(|s| s.is_finite() && *s >= 0.0);
        let seconds = seconds.ok_or_else(|| self.bad(name, "must be a number of seconds"))?;
        // Saturates for absurd values, which the wait limit then refuses.
        Ok((seconds * 1000.0).round() as u64)
    }

    fn bad(&self, name: &str, problem: impl std::fmt::Display) -> ModelError {
        ModelError::Malformed(format!("{}.{name} {problem}", self.at))
    }
}

/// `N` non-negative whole numbers, as the model writes coordinates.
fn whole_numbers<const N: usize>(value: &Value) -> Option<[u32; N]> {
    let items = value.as_array().filter(|items| items.len() == N)?;
    let mut out = [0; N];
    for (slot, item) in out.iter_mut().zip(items) {
        *slot = u32::try_from(whole_number(item)?).ok()?;
    }
    Some(out)
}

/// A non-negative whole number, also when written as `3.0`.
fn whole_number(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| value.as_f64().filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= u32::MAX as f64).map(|f| f as u64))
}

/// Presses and releases `button` where the pointer is, `times` times.
fn press_and_release(button: MouseButton, times: usize) -> Vec<Action> {
    (0..times).flat_map(|_| [Action::MouseDown { button }, Action::MouseUp { button }]).collect()
}

/// `steps` with `modifiers` held down around them.
fn held(modifiers: Option<Vec<String>>, steps: Vec<Action>) -> Vec<ModelAction> {
    let Some(keys) = modifiers else {
        return steps.into_iter().map(ModelAction::Act).collect();
    };
    let mut out = Vec::with_capacity(steps.len() + 2);
    out.push(ModelAction::Act(Action::KeyDown { keys: keys.clone() }));
    out.extend(steps.into_iter().map(ModelAction::Act));
    out.push(ModelAction::Act(Action::KeyUp { keys }));
    out
}

/// The contract's limits (text length, key count, wait length).
fn check_limits(actions: &[ModelAction], at: &str) -> Result<(), ModelError> {
    for action in actions {
        if let ModelAction::Act(action) = action {
            action.validate().map_err(|e| ModelError::Malformed(format!("{at} asks for too much: {e}")))?;
        }
    }
    Ok(())
}

/// Where the pointer is after `actions`, as far as they place it.
fn pointer_after(actions: &[ModelAction], mut pointer: Pointer) -> Pointer {
    for action in actions {
        pointer = match action {
            ModelAction::Act(
                Action::Click { x, y, .. }
                | Action::DoubleClick { x, y }
                | Action::TripleClick { x, y }
                | Action::Move { x, y }
                | Action::Scroll { x, y, .. },
            ) => Some([*x, *y]),
            ModelAction::Act(Action::Drag { path }) => path.last().copied().or(pointer),
            _ => pointer,
        };
    }
    pointer
}
