//! Actions as xdotool command lines, the way the E2B Desktop SDK drives its
//! desktop: each action is one shell command run through envd. Key names go
//! through [`keyboard`](flotilla_sandbox::keyboard), the same mapping the local
//! provider uses, and leave as keysym names xdotool understands; typed text
//! and every other argument are single-quoted for the shell. Points are
//! checked against the screen here, so a bad action fails before any
//! request is sent.

use std::time::Duration;

use flotilla_types::action::{Action, MouseButton};

use flotilla_sandbox::{keyboard, SandboxError};

/// The most wheel clicks a scroll may ask for on one axis.
const MAX_SCROLL_CLICKS: u32 = 1_000;
/// The pause between the clicks of a double or triple click, well inside
/// any toolkit's multi-click interval.
const MULTI_CLICK_DELAY_MS: u32 = 40;
/// How long any action command may take before its typing time.
const BASE_ACTION_TIMEOUT: Duration = Duration::from_secs(15);
/// The pause around each character outside the keymap. xdotool binds a
/// spare keycode for it and restores the keymap right after the keystroke;
/// a program that reads the keymap only after that loses the character, so
/// these keystrokes get time to land (the Desktop SDK types everything at
/// 75 ms a key for the same reason).
const REMAPPED_KEY_DELAY: Duration = Duration::from_millis(100);

/// What performing one action takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Run this shell command in the sandbox within this time.
    Run { command: String, timeout: Duration },
    /// Sleep here, without the sandbox.
    Sleep(Duration),
    /// Nothing to do.
    Nothing,
}

/// The step that performs `action` on a `screen`-sized display, typing
/// with `key_delay` between keystrokes.
pub(crate) fn step(action: &Action, screen: (u32, u32), key_delay: Duration) -> Result<Step, SandboxError> {
    action.validate().map_err(|e| SandboxError::InvalidAction(e.to_string()))?;
    let run = |command: String| Ok(Step::Run { command, timeout: BASE_ACTION_TIMEOUT });
    match action {
        Action::Click { x, y, button } => run(click(screen, (*x, *y), *button, 1)?),
        Action::DoubleClick { x, y } => run(click(screen, (*x, *y), MouseButton::Left, 2)?),
        Action::TripleClick { x, y } => run(click(screen, (*x, *y), MouseButton::Left, 3)?),
        Action::Move { x, y } => run(xdotool(&move_to(screen, (*x, *y))?)),
        Action::Drag { path } => run(drag(screen, path)?),
        Action::Scroll { x, y, scroll_x, scroll_y } => run(scroll(screen, (*x, *y), *scroll_x, *scroll_y)?),
        Action::Type { text } => type_text(text, key_delay),
        Action::Keypress { keys } => run(xdotool(&["key".into(), chord(keys)?])),
        Action::KeyDown { keys } => run(xdotool(&hold(keys, "keydown", false)?)),
        Action::KeyUp { keys } => run(xdotool(&hold(keys, "keyup", true)?)),
        Action::MouseDown { button } => run(xdotool(&["mousedown".into(), button_number(*button).into()])),
        Action::MouseUp { button } => run(xdotool(&["mouseup".into(), button_number(*button).into()])),
        Action::Wait { ms } => Ok(Step::Sleep(Duration::from_millis(*ms))),
        // A confirmation is cleared by the pipeline, never on the screen.
        Action::Screenshot {} | Action::Confirm { .. } => Ok(Step::Nothing),
    }
}

/// `xdotool` with `args`, each quoted for the shell.
fn xdotool(args: &[String]) -> String {
    let mut command = String::from("xdotool");
    for arg in args {
        command.push(' ');
        command.push_str(&quote(arg));
    }
    command
}

/// `text` as one single-quoted shell word: a `'` inside becomes `'\''`.
pub(crate) fn quote(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        if c == '\'' {
            quoted.push_str("'\\''");
        } else {
            quoted.push(c);
        }
    }
    quoted.push('\'');
    quoted
}

fn check_point(screen: (u32, u32), (x, y): (u32, u32)) -> Result<(), SandboxError> {
    if x >= screen.0 || y >= screen.1 {
        return Err(SandboxError::InvalidAction(format!("point ({x}, {y}) is outside the {}x{} screen", screen.0, screen.1)));
    }
    Ok(())
}

fn move_to(screen: (u32, u32), point: (u32, u32)) -> Result<Vec<String>, SandboxError> {
    check_point(screen, point)?;
    Ok(vec!["mousemove".into(), point.0.to_string(), point.1.to_string()])
}

fn button_number(button: MouseButton) -> &'static str {
    match button {
        MouseButton::Left => "1",
        MouseButton::Middle => "2",
        MouseButton::Right => "3",
    }
}

fn click(screen: (u32, u32), point: (u32, u32), button: MouseButton, count: u32) -> Result<String, SandboxError> {
    let mut args = move_to(screen, point)?;
    args.push("click".into());
    if count > 1 {
        args.extend(["--repeat".into(), count.to_string(), "--delay".into(), MULTI_CLICK_DELAY_MS.to_string()]);
    }
    args.push(button_number(button).into());
    Ok(xdotool(&args))
}

/// Press at the first point, move through the others, release at the last.
fn drag(screen: (u32, u32), path: &[[u32; 2]]) -> Result<String, SandboxError> {
    let Some(([x0, y0], rest)) = path.split_first() else {
        return Err(SandboxError::InvalidAction("a drag needs at least 2 points".into()));
    };
    let mut args = move_to(screen, (*x0, *y0))?;
    args.extend(["mousedown".into(), "1".into()]);
    for [x, y] in rest {
        args.extend(move_to(screen, (*x, *y))?);
    }
    args.extend(["mouseup".into(), "1".into()]);
    Ok(xdotool(&args))
}

/// Wheel clicks at a point: buttons 4/5 scroll up/down, 6/7 left/right.
fn scroll(screen: (u32, u32), point: (u32, u32), dx: i32, dy: i32) -> Result<String, SandboxError> {
    if dx.unsigned_abs() > MAX_SCROLL_CLICKS || dy.unsigned_abs() > MAX_SCROLL_CLICKS {
        return Err(SandboxError::InvalidAction(format!("a scroll is at most {MAX_SCROLL_CLICKS} wheel clicks each way")));
    }
    let mut args = move_to(screen, point)?;
    let vertical = if dy > 0 { "5" } else { "4" };
    let horizontal = if dx > 0 { "7" } else { "6" };
    for (button, clicks) in [(vertical, dy.unsigned_abs()), (horizontal, dx.unsigned_abs())] {
        if clicks > 0 {
            args.extend(["click".into(), "--repeat".into(), clicks.to_string(), "--delay".into(), "0".into(), button.into()]);
        }
    }
    Ok(xdotool(&args))
}

/// Types `text` as it is: control characters other than newline and tab
/// are refused (as the local provider refuses them), `\r\n` is one Return.
/// ASCII runs go at `key_delay`; other characters, which the keymap may
/// lack, at [`REMAPPED_KEY_DELAY`].
fn type_text(text: &str, key_delay: Duration) -> Result<Step, SandboxError> {
    keyboard::text(text)?;
    let normalized = text.replace("\r\n", "\n").replace('\r', "\n");
    let mut commands = Vec::new();
    let mut timeout = BASE_ACTION_TIMEOUT;
    for (run, ascii) in runs(&normalized) {
        let delay = if ascii { key_delay } else { REMAPPED_KEY_DELAY.max(key_delay) };
        let count = u32::try_from(run.chars().count()).unwrap_or(u32::MAX);
        timeout += (delay + Duration::from_millis(10)).saturating_mul(count);
        commands.push(xdotool(&["type".into(), "--delay".into(), delay.as_millis().to_string(), "--".into(), run.to_owned()]));
    }
    Ok(Step::Run { command: commands.join(" && "), timeout })
}

/// `text` cut into maximal runs of ASCII and of other characters.
fn runs(text: &str) -> Vec<(&str, bool)> {
    let mut runs = Vec::new();
    let mut start = 0;
    let mut current = None;
    for (at, c) in text.char_indices() {
        let ascii = c.is_ascii();
        if current.is_some_and(|kind| kind != ascii) {
            runs.push((&text[start..at], !ascii));
            start = at;
        }
        current = Some(ascii);
    }
    if let Some(ascii) = current {
        runs.push((&text[start..], ascii));
    }
    runs
}

/// A chord as xdotool's `key` argument: keysym names joined with `+`.
fn chord(keys: &[String]) -> Result<String, SandboxError> {
    let names: Vec<String> = keyboard::chord(keys)?.into_iter().map(|k| k.name).collect();
    Ok(names.join("+"))
}

/// `keydown`/`keyup` with each key of a chord, released in reverse order.
fn hold(keys: &[String], verb: &str, reverse: bool) -> Result<Vec<String>, SandboxError> {
    let mut names: Vec<String> = keyboard::chord(keys)?.into_iter().map(|k| k.name).collect();
    if reverse {
        names.reverse();
    }
    Ok(names.into_iter().flat_map(|name| [verb.to_owned(), name]).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCREEN: (u32, u32) = (1024, 768);

    fn command(action: Action) -> String {
        match step(&action, SCREEN, Duration::from_millis(5)).expect("valid action") {
            Step::Run { command, .. } => command,
            other => panic!("not a command: {other:?}"),
        }
    }

    #[test]
    fn quoting_survives_any_text() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("$(rm -rf ~) `x` \"y\""), "'$(rm -rf ~) `x` \"y\"'");
    }

    #[test]
    fn pointer_actions_become_xdotool_commands() {
        assert_eq!(command(Action::Move { x: 1, y: 2 }), "xdotool 'mousemove' '1' '2'");
        assert_eq!(command(Action::Click { x: 3, y: 4, button: MouseButton::Right }), "xdotool 'mousemove' '3' '4' 'click' '3'");
        assert_eq!(
            command(Action::TripleClick { x: 3, y: 4 }),
            "xdotool 'mousemove' '3' '4' 'click' '--repeat' '3' '--delay' '40' '1'"
        );
        assert_eq!(
            command(Action::Drag { path: vec![[1, 1], [2, 2], [3, 3]] }),
            "xdotool 'mousemove' '1' '1' 'mousedown' '1' 'mousemove' '2' '2' 'mousemove' '3' '3' 'mouseup' '1'"
        );
        assert_eq!(
            command(Action::Scroll { x: 5, y: 6, scroll_x: -2, scroll_y: 3 }),
            "xdotool 'mousemove' '5' '6' 'click' '--repeat' '3' '--delay' '0' '5' 'click' '--repeat' '2' '--delay' '0' '6'"
        );
        assert_eq!(command(Action::MouseDown { button: MouseButton::Middle }), "xdotool 'mousedown' '2'");
    }

    #[test]
    fn keys_go_through_the_shared_names() {
        assert_eq!(command(Action::Keypress { keys: vec!["CTRL+U".into()] }), "xdotool 'key' 'Control_L+u'");
        assert_eq!(command(Action::Keypress { keys: vec!["pgup".into()] }), "xdotool 'key' 'Prior'");
        assert_eq!(
            command(Action::KeyUp { keys: vec!["ctrl".into(), "shift".into()] }),
            "xdotool 'keyup' 'Shift_L' 'keyup' 'Control_L'"
        );
        let unknown = step(&Action::Keypress { keys: vec!["hyperdrive".into()] }, SCREEN, Duration::ZERO);
        assert!(matches!(unknown, Err(SandboxError::InvalidAction(_))), "{unknown:?}");
    }

    #[test]
    fn text_is_typed_quoted() {
        assert_eq!(
            command(Action::Type { text: "-a 'b'\r\n".into() }),
            r"xdotool 'type' '--delay' '5' '--' '-a '\''b'\''
'"
        );
        assert_eq!(
            command(Action::Type { text: "café!".into() }),
            "xdotool 'type' '--delay' '5' '--' 'caf' && xdotool 'type' '--delay' '100' '--' 'é' && xdotool 'type' '--delay' '5' '--' '!'"
        );
        assert_eq!(runs("ab"), [("ab", true)]);
        assert_eq!(runs("éa"), [("é", false), ("a", true)]);
        assert!(runs("").is_empty());
        let bell = step(&Action::Type { text: "\u{7}".into() }, SCREEN, Duration::ZERO);
        assert!(matches!(bell, Err(SandboxError::InvalidAction(_))), "{bell:?}");
    }

    #[test]
    fn points_off_screen_and_huge_scrolls_are_refused() {
        for action in [
            Action::Click { x: 1024, y: 0, button: MouseButton::Left },
            Action::Move { x: 0, y: 768 },
            Action::Drag { path: vec![[0, 0], [5000, 1]] },
            Action::Scroll { x: 1, y: 1, scroll_x: 0, scroll_y: 5000 },
        ] {
            let result = step(&action, SCREEN, Duration::ZERO);
            assert!(matches!(result, Err(SandboxError::InvalidAction(_))), "{action:?}: {result:?}");
        }
    }

    #[test]
    fn wait_and_screenshot_need_no_command() {
        assert_eq!(step(&Action::Wait { ms: 20 }, SCREEN, Duration::ZERO).ok(), Some(Step::Sleep(Duration::from_millis(20))));
        assert_eq!(step(&Action::Screenshot {}, SCREEN, Duration::ZERO).ok(), Some(Step::Nothing));
    }
}
