//! Secrets out of text that leaves the process. Error messages quote what
//! they met: a provider's answer (E2B's `envdAccessToken`), a URL with its
//! password (`redis://:pw@host`), a header. Every error stored on a task or
//! sent as an event, every configuration error and every provider body
//! excerpt passes through [`redact`], which masks, as `***`:
//!
//! - the password of a URL's user information (`scheme://user:***@host`);
//! - the value of a secret-named field, quoted or not, in JSON or
//!   `key=value` form (`envdAccessToken`, `accessToken`, `api_key`,
//!   `apiKey`, `token`, `password`, `secret`, `authorization`, …);
//! - a bearer credential (`Bearer ***`);
//! - provider key shapes (`sk-ant-…`, `sk-…`, `e2b_…`).
//!
//! It is a net for text no one meant to carry a secret, not a licence to
//! put one in: code still never formats a key into a message.

use std::borrow::Cow;

/// What a secret becomes.
const MASK: &str = "***";

/// Field names whose values are secrets, compared without regard to case,
/// `-` or `_`.
const SECRET_FIELDS: &[&str] = &[
    "envdaccesstoken",
    "accesstoken",
    "refreshtoken",
    "token",
    "apikey",
    "xapikey",
    "password",
    "passwd",
    "secret",
    "secretkey",
    "secretaccesskey",
    "awssecretaccesskey",
    "authorization",
    "clientsecret",
];

/// Prefixes of provider keys, each followed by at least 8 key characters.
const KEY_PREFIXES: &[&str] = &["sk-ant-", "sk-", "e2b_"];

/// `text` with every secret it visibly holds masked.
pub fn redact(text: &str) -> Cow<'_, str> {
    if !might_hold_secret(text) {
        return Cow::Borrowed(text);
    }
    let text = url_passwords(text);
    let text = secret_fields(&text);
    let text = bearer_tokens(&text);
    Cow::Owned(key_shapes(&text))
}

/// A quick look for anything a rule below could match.
fn might_hold_secret(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    lower.contains("://")
        || lower.contains("bearer")
        || KEY_PREFIXES.iter().any(|p| lower.contains(p))
        || SECRET_FIELDS.iter().any(|f| squeeze(&lower).contains(f))
}

fn squeeze(text: &str) -> String {
    text.chars().filter(|c| *c != '_' && *c != '-').collect()
}

fn is_key_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Where a value (unquoted) ends.
fn value_end(rest: &str) -> usize {
    rest.find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ',' | '}' | ']' | '&' | ';' | ')')).unwrap_or(rest.len())
}

/// `scheme://user:password@host` → `scheme://user:***@host`.
fn url_passwords(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let authority_end =
            tail.find(|c: char| c.is_whitespace() || matches!(c, '/' | '?' | '#' | '"' | '\'')).unwrap_or(tail.len());
        let authority = &tail[..authority_end];
        match authority.rfind('@') {
            Some(userinfo_end) => {
                let userinfo = &authority[..userinfo_end];
                match userinfo.split_once(':') {
                    Some((user, _)) => out.push_str(&format!("{user}:{MASK}")),
                    None => out.push_str(userinfo),
                }
                out.push_str(&authority[userinfo_end..]);
            }
            None => out.push_str(authority),
        }
        rest = &tail[authority_end..];
    }
    out.push_str(rest);
    out
}

/// `"envdAccessToken": "v"`, `api_key=v`, `password: v` → the value masked.
fn secret_fields(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic()) {
        let word_len = rest[start..].find(|c: char| !is_key_char(c)).unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        out.push_str(&rest[..start + word_len]);
        rest = &rest[start + word_len..];
        let preceded_by_key_char = out[..out.len() - word_len].chars().next_back().is_some_and(is_key_char);
        if preceded_by_key_char || !SECRET_FIELDS.contains(&squeeze(&word.to_ascii_lowercase()).as_str()) {
            continue;
        }
        // An optional closing quote, spaces, then `:` or `=`.
        let after_key = ["\\\"", "\"", "'"].iter().find_map(|q| rest.strip_prefix(q)).unwrap_or(rest);
        let trimmed = after_key.trim_start();
        let Some(after_sep) = trimmed.strip_prefix(':').or_else(|| trimmed.strip_prefix('=')) else { continue };
        let value_start = after_sep.trim_start();
        let skipped = rest.len() - value_start.len();
        out.push_str(&rest[..skipped]);
        rest = value_start;
        // Quoted as JSON, or as JSON within a quoted log field (`\"`).
        let quote = ["\\\"", "\"", "'"].into_iter().find(|q| rest.starts_with(q));
        let body = quote.map_or(rest, |q| &rest[q.len()..]);
        let end = match quote {
            Some(q) => body.find(q).unwrap_or(body.len()),
            None => value_end(body),
        };
        if body[..end].eq_ignore_ascii_case("null") || end == 0 {
            continue;
        }
        if let Some(q) = quote {
            out.push_str(q);
        }
        // `Authorization: Bearer x`: keep the scheme word, mask the rest.
        let value = &body[..end];
        match value.split_once(' ') {
            Some((scheme, _)) if quote.is_some() && scheme.eq_ignore_ascii_case("bearer") => {
                out.push_str(&format!("{scheme} {MASK}"))
            }
            _ => out.push_str(MASK),
        }
        rest = &body[end..];
    }
    out.push_str(rest);
    out
}

/// `Bearer abc` → `Bearer ***`.
fn bearer_tokens(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.to_ascii_lowercase().find("bearer ") {
        let (head, tail) = rest.split_at(at + "bearer ".len());
        out.push_str(head);
        let tail_trimmed = tail.trim_start();
        out.push_str(&tail[..tail.len() - tail_trimmed.len()]);
        let end = value_end(tail_trimmed);
        if end > 0 && &tail_trimmed[..end] != MASK {
            out.push_str(MASK);
        } else {
            out.push_str(&tail_trimmed[..end]);
        }
        rest = &tail_trimmed[end..];
    }
    out.push_str(rest);
    out
}

/// `sk-ant-api03-…` → `sk-ant-***`, and the other key shapes alike.
fn key_shapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while !rest.is_empty() {
        let boundary = out.chars().next_back().is_none_or(|c| !is_key_char(c));
        if boundary {
            for prefix in KEY_PREFIXES {
                if let Some(after) = rest.strip_prefix(prefix) {
                    let len = after.find(|c: char| !is_key_char(c)).unwrap_or(after.len());
                    if len >= 8 {
                        out.push_str(prefix);
                        out.push_str(MASK);
                        rest = &after[len..];
                        continue 'scan;
                    }
                }
            }
        }
        let next = rest.chars().next().map_or(1, char::len_utf8);
        out.push_str(&rest[..next]);
        rest = &rest[next..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_left_alone() {
        for text in ["the sandbox local-1 does not exist", "état: prêt — 100 %"] {
            assert!(matches!(redact(text), Cow::Borrowed(t) if t == text), "{text}");
        }
        assert_eq!(
            redact("a token budget of 10 was spent; password: none given"),
            "a token budget of 10 was spent; password: *** given"
        );
    }

    #[test]
    fn url_passwords_are_masked() {
        assert_eq!(redact("cannot reach redis://:hunter2@10.0.0.5:6379/0"), "cannot reach redis://:***@10.0.0.5:6379/0");
        assert_eq!(redact("rediss://default:s3cr3t@cache:6380"), "rediss://default:***@cache:6380");
        assert_eq!(redact("see https://example.com/path?q=1"), "see https://example.com/path?q=1");
    }

    #[test]
    fn secret_fields_are_masked() {
        let body = r#"{"sandboxID":"sbx1","envdAccessToken":"tok-123456","domain":null}"#;
        assert_eq!(redact(body), r#"{"sandboxID":"sbx1","envdAccessToken":"***","domain":null}"#);
        assert_eq!(redact("api_key=abcdef&x=1"), "api_key=***&x=1");
        assert_eq!(redact("x-api-key: abc123 sent"), "x-api-key: *** sent");
        assert_eq!(redact(r#"{"password": "pw", "token": null}"#), r#"{"password": "***", "token": null}"#);
        assert_eq!(redact(r#"{"authorization": "Bearer abc"}"#), r#"{"authorization": "Bearer ***"}"#);
        assert_eq!(redact("the token budget is spent"), "the token budget is spent");
        let logged = r#"body="{\"sandboxID\":\"sbx1\",\"envdAccessToken\":\"tok-123456\"}""#;
        assert_eq!(redact(logged), r#"body="{\"sandboxID\":\"sbx1\",\"envdAccessToken\":\"***\"}""#);
    }

    #[test]
    fn bearer_credentials_and_key_shapes_are_masked() {
        assert_eq!(redact("header Bearer ftk_abc.def was refused"), "header Bearer *** was refused");
        assert_eq!(redact("key sk-ant-api03-AbCdEf123456 refused"), "key sk-ant-*** refused");
        assert_eq!(redact("OPENAI key sk-proj1234567890"), "OPENAI key sk-***");
        assert_eq!(redact("E2B key e2b_0123456789abcdef"), "E2B key e2b_***");
        assert_eq!(redact("task-sk-abcdefghijk stays"), "task-sk-abcdefghijk stays");
    }
}
