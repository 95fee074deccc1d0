//! JSON the user typed or wrote to a file (a spec file, a line of a batch, a
//! `--defaults` object), read into a value, and what is wrong with it said
//! the way a person fixes it: text that stops early is malformed JSON that
//! ends too soon, never a fault of the field it stopped in; a syntax error
//! says where; the position is given once, as the line and column of the
//! text the user gave (a caller that names a line itself asks for the
//! column alone).

use serde_json::error::Category;
use serde_json::Value;

/// Where a fault is placed in the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Position {
    /// `at line 2, column 7`: the text may span lines.
    LineAndColumn,
    /// `at column 7`: the caller names the line.
    Column,
}

/// Parses `text` as one JSON value; the error is a phrase such as
/// `malformed JSON: it ends too soon, at column 28`.
pub fn parse(text: &str, position: Position) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|err| describe(&err, position))
}

/// The fault of a parse, without the parser's own `at line … column …`.
pub fn describe(err: &serde_json::Error, position: Position) -> String {
    let text = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let reason = text.strip_suffix(&suffix).unwrap_or(&text);
    let at = match position {
        Position::LineAndColumn => format!("at line {}, column {}", err.line(), err.column()),
        Position::Column => format!("at column {}", err.column()),
    };
    match err.classify() {
        Category::Eof if err.column() == 0 && err.line() <= 1 => "no JSON: the text is empty".to_owned(),
        Category::Eof => format!("malformed JSON: it ends too soon ({reason}), {at}"),
        Category::Syntax => format!("malformed JSON: {reason}, {at}"),
        Category::Data | Category::Io => format!("{reason}, {at}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_that_stops_early_is_malformed_json_that_ends_too_soon() {
        let err = parse(r#"{"prompt": "b", "actions": ["#, Position::Column).expect_err("truncated");
        assert_eq!(err, "malformed JSON: it ends too soon (EOF while parsing a list), at column 28");
        assert!(!err.contains("line"), "the caller names the line: {err}");
        let err = parse("{\"prompt\":\n \"a\", \"sandbox\": {", Position::LineAndColumn).expect_err("truncated");
        assert!(err.starts_with("malformed JSON: it ends too soon") && err.ends_with("at line 2, column 18"), "{err}");
        assert!(!err.contains("sandbox"), "no field is blamed: {err}");
    }

    #[test]
    fn a_syntax_error_says_where_once() {
        let err = parse(r#"{"prompt" "a"}"#, Position::LineAndColumn).expect_err("no colon");
        assert_eq!(err, "malformed JSON: expected `:`, at line 1, column 11");
        assert_eq!(err.matches("line").count(), 1);
        assert_eq!(parse("", Position::Column).expect_err("empty"), "no JSON: the text is empty");
    }
}
