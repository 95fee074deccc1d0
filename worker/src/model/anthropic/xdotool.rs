//! Key names in xdotool's syntax, which the computer tool's `key`,
//! `hold_key` and held-modifier `text` use (`"ctrl+s"`, `"Return"`,
//! `"KP_0"`, `"ctrl+a Delete"`), turned into names the sandboxes press
//! (those [`crate::sandbox::keyboard::lookup`] knows). Most xdotool names are
//! already such names; punctuation keysym names (`equal`, `comma`) become
//! their character and keypad keys (`KP_0`, `KP_Add`) the key they type.

use crate::sandbox::keyboard::{char_keysym, lookup};

/// The chords of a key sequence, pressed one after the other: `"ctrl+a
/// Delete"` is two. Says what is wrong when a name is unknown.
pub(super) fn sequence(text: &str) -> Result<Vec<Vec<String>>, String> {
    let chords: Vec<&str> = text.split_whitespace().collect();
    if chords.is_empty() {
        return Err("must name at least one key".to_owned());
    }
    chords.into_iter().map(chord).collect()
}

/// The keys of one chord, pressed together: `"ctrl+shift+t"`.
fn chord(chord: &str) -> Result<Vec<String>, String> {
    split_chord(chord).into_iter().map(|part| key_name(part).ok_or_else(|| format!("names the unknown key {part:?}"))).collect()
}

/// `"ctrl+s"` is two keys; `"+"` alone and a trailing `"++"` are the plus key.
fn split_chord(chord: &str) -> Vec<&str> {
    if chord == "+" {
        return vec!["+"];
    }
    match chord.strip_suffix("++") {
        Some(rest) => rest.split('+').chain(["+"]).collect(),
        None => chord.split('+').collect(),
    }
}

/// The name to press for one xdotool key name, or `None` when unknown.
pub(super) fn key_name(name: &str) -> Option<String> {
    if lookup(name).is_some() {
        return Some(name.to_owned());
    }
    if let Some(c) = punctuation(name) {
        return Some(c.to_string());
    }
    keypad(name)
}

/// The character whose X keysym is `name`, like `=` for `equal`.
fn punctuation(name: &str) -> Option<char> {
    ('!'..='~')
        .filter(|c| !c.is_ascii_alphanumeric())
        .find(|c| char_keysym(*c).is_some_and(|keysym| keysym.name.eq_ignore_ascii_case(name)))
}

/// A keypad key as the key it types: `KP_0` is `0`, `KP_Add` is `+`,
/// `KP_Home` is `Home`.
fn keypad(name: &str) -> Option<String> {
    let prefix = name.get(..3)?;
    if !prefix.eq_ignore_ascii_case("kp_") {
        return None;
    }
    let rest = &name[3..];
    let operator = match rest.to_ascii_lowercase().as_str() {
        "add" => "+",
        "subtract" => "-",
        "multiply" => "*",
        "divide" => "/",
        "decimal" => ".",
        "separator" => ",",
        _ => return key_name(rest),
    };
    Some(operator.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(text: &str) -> Vec<Vec<String>> {
        sequence(text).expect("known keys")
    }

    #[test]
    fn chords_split_on_plus_and_sequences_on_spaces() {
        assert_eq!(keys("ctrl+s"), [vec!["ctrl", "s"]]);
        assert_eq!(keys("ctrl+a Delete"), [vec!["ctrl", "a"], vec!["Delete"]]);
        assert_eq!(keys("+"), [vec!["+"]]);
        assert_eq!(keys("ctrl++"), [vec!["ctrl", "+"]]);
        assert_eq!(keys("alt+Tab"), [vec!["alt", "Tab"]]);
    }

    #[test]
    fn xdotool_names_become_names_the_sandbox_knows() {
        assert_eq!(key_name("Return").as_deref(), Some("Return"));
        assert_eq!(key_name("Page_Down").as_deref(), Some("Page_Down"));
        assert_eq!(key_name("super").as_deref(), Some("super"));
        assert_eq!(key_name("equal").as_deref(), Some("="));
        assert_eq!(key_name("BracketLeft").as_deref(), Some("["));
        assert_eq!(key_name("KP_0").as_deref(), Some("0"));
        assert_eq!(key_name("KP_Add").as_deref(), Some("+"));
        assert_eq!(key_name("KP_Enter").as_deref(), Some("KP_Enter"));
        assert_eq!(key_name("kp_home").as_deref(), Some("home"));
        assert!(key_name("KP_").is_none());
        assert!(key_name("Hyperdrive").is_none());
    }

    #[test]
    fn unknown_or_empty_keys_are_refused() {
        assert!(sequence("").is_err());
        assert!(sequence("   ").is_err());
        assert_eq!(sequence("ctrl+warp").err().as_deref(), Some("names the unknown key \"warp\""));
        assert!(sequence("ctrl++a").is_err());
    }
}
