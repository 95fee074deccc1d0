//! Key names: models and the contract name keys the way the OpenAI and
//! Anthropic computer tools do (`ctrl`, `enter`, `esc`, `cmd`, `pgup`,
//! `ArrowLeft`, `F5`, `a`), while X wants keysyms (`Control_L`, `Return`).
//! This maps one vocabulary to the other in one place, for every provider:
//! the local one presses keysym values through XTEST, one that drives a
//! remote desktop through xdotool passes the names.

use super::SandboxError;

/// An X keysym: the name xdotool and `XStringToKeysym` accept, and its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keysym {
    pub name: String,
    pub value: u32,
}

impl Keysym {
    fn named(name: &str, value: u32) -> Self {
        Self { name: name.to_owned(), value }
    }
}

/// Named keys, matched without regard to case, `_`, `-` or spaces.
const NAMED: &[(&[&str], &str, u32)] = &[
    (&["ctrl", "control", "controll", "lctrl", "leftctrl"], "Control_L", 0xffe3),
    (&["rctrl", "controlr", "rightctrl"], "Control_R", 0xffe4),
    (&["shift", "shiftl", "lshift", "leftshift"], "Shift_L", 0xffe1),
    (&["rshift", "shiftr", "rightshift"], "Shift_R", 0xffe2),
    (&["alt", "altl", "lalt", "leftalt", "option", "opt"], "Alt_L", 0xffe9),
    (&["ralt", "altr", "rightalt", "altgr"], "Alt_R", 0xffea),
    (&["meta", "cmd", "command", "super", "superl", "win", "windows", "os"], "Super_L", 0xffeb),
    (&["superr", "rightsuper"], "Super_R", 0xffec),
    (&["enter", "return"], "Return", 0xff0d),
    (&["kpenter"], "KP_Enter", 0xff8d),
    (&["esc", "escape"], "Escape", 0xff1b),
    (&["tab"], "Tab", 0xff09),
    (&["backspace", "back"], "BackSpace", 0xff08),
    (&["delete", "del"], "Delete", 0xffff),
    (&["insert", "ins"], "Insert", 0xff63),
    (&["home"], "Home", 0xff50),
    (&["end"], "End", 0xff57),
    (&["pgup", "pageup", "prior"], "Prior", 0xff55),
    (&["pgdn", "pagedown", "next"], "Next", 0xff56),
    (&["up", "arrowup", "uparrow"], "Up", 0xff52),
    (&["down", "arrowdown", "downarrow"], "Down", 0xff54),
    (&["left", "arrowleft", "leftarrow"], "Left", 0xff51),
    (&["right", "arrowright", "rightarrow"], "Right", 0xff53),
    (&["space", "spacebar"], "space", 0x20),
    (&["capslock", "caps"], "Caps_Lock", 0xffe5),
    (&["numlock"], "Num_Lock", 0xff7f),
    (&["scrolllock"], "Scroll_Lock", 0xff14),
    (&["printscreen", "print", "prtsc", "prtscn"], "Print", 0xff61),
    (&["pause", "break"], "Pause", 0xff13),
    (&["menu", "contextmenu", "apps"], "Menu", 0xff67),
    (&["plus"], "plus", 0x2b),
    (&["minus"], "minus", 0x2d),
];

/// X names of the printable ASCII characters that are not letters or digits.
const PUNCTUATION: &[(char, &str)] = &[
    (' ', "space"),
    ('!', "exclam"),
    ('"', "quotedbl"),
    ('#', "numbersign"),
    ('$', "dollar"),
    ('%', "percent"),
    ('&', "ampersand"),
    ('\'', "apostrophe"),
    ('(', "parenleft"),
    (')', "parenright"),
    ('*', "asterisk"),
    ('+', "plus"),
    (',', "comma"),
    ('-', "minus"),
    ('.', "period"),
    ('/', "slash"),
    (':', "colon"),
    (';', "semicolon"),
    ('<', "less"),
    ('=', "equal"),
    ('>', "greater"),
    ('?', "question"),
    ('@', "at"),
    ('[', "bracketleft"),
    ('\\', "backslash"),
    (']', "bracketright"),
    ('^', "asciicircum"),
    ('_', "underscore"),
    ('`', "grave"),
    ('{', "braceleft"),
    ('|', "bar"),
    ('}', "braceright"),
    ('~', "asciitilde"),
];

/// The keysym of the first function key; F1 to F35 are consecutive.
const F1: u32 = 0xffbe;
const MAX_FUNCTION_KEY: u32 = 35;

/// The keysym for one key name, or `None` when the name is unknown.
pub fn lookup(key: &str) -> Option<Keysym> {
    let mut chars = key.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        return char_keysym(c);
    }
    let folded: String = key.chars().filter(|c| !matches!(c, '_' | '-' | ' ')).flat_map(char::to_lowercase).collect();
    if let Some((_, name, value)) = NAMED.iter().find(|(aliases, _, _)| aliases.contains(&folded.as_str())) {
        return Some(Keysym::named(name, *value));
    }
    function_key(&folded)
}

fn function_key(folded: &str) -> Option<Keysym> {
    let number: u32 = folded.strip_prefix('f')?.parse().ok()?;
    if !(1..=MAX_FUNCTION_KEY).contains(&number) {
        return None;
    }
    Some(Keysym { name: format!("F{number}"), value: F1 + number - 1 })
}

/// The keysym that types character `c`: `\n` is Return, `\t` Tab; other
/// control characters have none.
pub fn char_keysym(c: char) -> Option<Keysym> {
    match c {
        '\n' | '\r' => return Some(Keysym::named("Return", 0xff0d)),
        '\t' => return Some(Keysym::named("Tab", 0xff09)),
        c if c.is_control() => return None,
        _ => {}
    }
    if let Some((_, name)) = PUNCTUATION.iter().find(|(p, _)| *p == c) {
        return Some(Keysym::named(name, c as u32));
    }
    let code = c as u32;
    if c.is_ascii_alphanumeric() {
        return Some(Keysym { name: c.to_string(), value: code });
    }
    // Latin-1 keysyms equal their code points; every other character has the
    // Unicode keysym 0x01000000 + code point.
    let value = if (0xa0..=0xff).contains(&code) { code } else { 0x0100_0000 + code };
    Some(Keysym { name: format!("U{code:04X}"), value })
}

/// The keysyms of a key chord such as `["ctrl", "shift", "t"]`, pressed in
/// order and released in reverse. An entry may itself be a chord written
/// with `+` (`"ctrl+c"`). Letters in a chord of several keys are taken as
/// lower case, so `["CTRL", "A"]` means ctrl+a; add `shift` for capitals.
pub fn chord(keys: &[String]) -> Result<Vec<Keysym>, SandboxError> {
    let names: Vec<&str> = keys.iter().flat_map(|k| split_chord(k)).collect();
    let several = names.len() > 1;
    names
        .into_iter()
        .map(|name| {
            let name_lower;
            let name = if several && name.len() == 1 && name.chars().all(|c| c.is_ascii_uppercase()) {
                name_lower = name.to_ascii_lowercase();
                name_lower.as_str()
            } else {
                name
            };
            lookup(name).ok_or_else(|| SandboxError::InvalidAction(format!("unknown key name {name:?}")))
        })
        .collect()
}

/// `"ctrl+c"` is two keys; `"+"` alone is the plus key.
fn split_chord(key: &str) -> Vec<&str> {
    if key.len() > 1 && key.contains('+') {
        key.split('+').filter(|part| !part.is_empty()).collect()
    } else {
        vec![key]
    }
}

/// The keysym for each character of `text`, refusing control characters
/// other than newline and tab. A `\r\n` pair is one Return.
pub fn text(text: &str) -> Result<Vec<Keysym>, SandboxError> {
    let mut out = Vec::with_capacity(text.len());
    let mut previous = None;
    for c in text.chars() {
        let skip = c == '\n' && previous == Some('\r');
        previous = Some(c);
        if skip {
            continue;
        }
        let keysym = char_keysym(c)
            .ok_or_else(|| SandboxError::InvalidAction(format!("cannot type control character U+{:04X}", c as u32)))?;
        out.push(keysym);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(key: &str) -> Option<String> {
        lookup(key).map(|k| k.name)
    }

    fn chord_names(keys: &[&str]) -> Vec<String> {
        let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
        chord(&keys).expect("known keys").into_iter().map(|k| k.name).collect()
    }

    #[test]
    fn contract_names_map_to_x_keysyms() {
        assert_eq!(name("ctrl").as_deref(), Some("Control_L"));
        assert_eq!(name("CTRL").as_deref(), Some("Control_L"));
        assert_eq!(name("enter").as_deref(), Some("Return"));
        assert_eq!(name("Return").as_deref(), Some("Return"));
        assert_eq!(name("esc").as_deref(), Some("Escape"));
        assert_eq!(name("cmd").as_deref(), Some("Super_L"));
        assert_eq!(name("meta").as_deref(), Some("Super_L"));
        assert_eq!(name("pgup").as_deref(), Some("Prior"));
        assert_eq!(name("PageDown").as_deref(), Some("Next"));
        assert_eq!(name("ArrowLeft").as_deref(), Some("Left"));
        assert_eq!(name("up").as_deref(), Some("Up"));
        assert_eq!(name("space").as_deref(), Some("space"));
        assert_eq!(name("backspace").as_deref(), Some("BackSpace"));
        assert_eq!(name("Page_Up").as_deref(), Some("Prior"));
    }

    #[test]
    fn function_keys_map() {
        assert_eq!(lookup("F1"), Some(Keysym::named("F1", 0xffbe)));
        assert_eq!(lookup("f12"), Some(Keysym::named("F12", 0xffc9)));
        assert_eq!(lookup("F0"), None);
        assert_eq!(lookup("F36"), None);
        assert_eq!(lookup("Fx"), None);
    }

    #[test]
    fn single_characters_map_to_their_keysyms() {
        assert_eq!(lookup("a"), Some(Keysym::named("a", 0x61)));
        assert_eq!(lookup("A"), Some(Keysym::named("A", 0x41)));
        assert_eq!(lookup("7"), Some(Keysym::named("7", 0x37)));
        assert_eq!(lookup("/"), Some(Keysym::named("slash", 0x2f)));
        assert_eq!(lookup("+"), Some(Keysym::named("plus", 0x2b)));
        assert_eq!(lookup("é"), Some(Keysym::named("U00E9", 0xe9)));
        assert_eq!(lookup("€"), Some(Keysym::named("U20AC", 0x0100_20ac)));
    }

    #[test]
    fn unknown_names_are_refused() {
        assert_eq!(lookup("hyperdrive"), None);
        assert_eq!(lookup(""), None);
        assert!(matches!(chord(&["ctrl".into(), "warp".into()]), Err(SandboxError::InvalidAction(_))));
    }

    #[test]
    fn chords_split_and_fold_letters() {
        assert_eq!(chord_names(&["ctrl", "c"]), ["Control_L", "c"]);
        assert_eq!(chord_names(&["CTRL", "C"]), ["Control_L", "c"]);
        assert_eq!(chord_names(&["ctrl+shift+t"]), ["Control_L", "Shift_L", "t"]);
        assert_eq!(chord_names(&["ctrl", "+"]), ["Control_L", "plus"]);
        assert_eq!(chord_names(&["A"]), ["A"]);
        assert_eq!(chord_names(&["alt", "F4"]), ["Alt_L", "F4"]);
    }

    #[test]
    fn text_maps_each_character() {
        let names: Vec<String> = text("a B\r\n\t!").expect("typable").into_iter().map(|k| k.name).collect();
        assert_eq!(names, ["a", "space", "B", "Return", "Tab", "exclam"]);
        assert!(matches!(text("bell\u{7}"), Err(SandboxError::InvalidAction(_))));
    }
}
