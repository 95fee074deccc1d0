//! Counting the tokens of a model call from the provider's answer as it
//! streams through the gateway: the `usage` of a JSON answer, or of the
//! `message_start` and `message_delta` events of a server-sent stream
//! (whose `output_tokens` is the running total of the message). Input
//! tokens include cache reads and writes, which are also kept apart for
//! pricing. What cannot be parsed counts 0.

use axum::http::HeaderValue;
use flotilla_types::cost::TokenCounts;
use serde_json::Value;

/// The most of a JSON answer (or of one event line) kept to read its usage.
const MAX_KEPT: usize = 1024 * 1024;

/// How an answer is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Json,
    EventStream,
}

impl Format {
    pub fn of(content_type: Option<&HeaderValue>) -> Self {
        match content_type.and_then(|v| v.to_str().ok()) {
            Some(t) if t.starts_with("text/event-stream") => Format::EventStream,
            _ => Format::Json,
        }
    }
}

/// Reads usage from an answer's bytes as they pass.
pub(super) struct Counter {
    format: Format,
    kept: Vec<u8>,
    /// The input tokens of the answer.
    input: u64,
    /// The output tokens of the current message counted so far.
    output: u64,
    /// Of the input, the tokens read from and written to the prompt cache.
    cache_read: u64,
    cache_write: u64,
    /// The model that answered, as the answer names it.
    model: Option<String>,
    done: bool,
}

impl Counter {
    pub fn new(format: Format) -> Self {
        Self { format, kept: Vec::new(), input: 0, output: 0, cache_read: 0, cache_write: 0, model: None, done: false }
    }

    /// What the answer read so far spent: the model and its tokens.
    pub fn spent(&self) -> (Option<&str>, TokenCounts) {
        let tokens =
            TokenCounts { input: self.input, output: self.output, cache_read: self.cache_read, cache_write: self.cache_write };
        (self.model.as_deref(), tokens)
    }

    /// Reads the input side of a `usage` object.
    fn read_input(&mut self, usage: &Value) {
        self.input = input(usage);
        self.cache_read = number(usage, "cache_read_input_tokens");
        self.cache_write = number(usage, "cache_creation_input_tokens");
    }

    /// Takes the next bytes; returns how many tokens they add.
    pub fn push(&mut self, bytes: &[u8]) -> u64 {
        match self.format {
            Format::Json => self.push_json(bytes),
            Format::EventStream => self.push_events(bytes),
        }
    }

    fn push_json(&mut self, bytes: &[u8]) -> u64 {
        if self.done || self.kept.len() + bytes.len() > MAX_KEPT {
            return 0;
        }
        self.kept.extend_from_slice(bytes);
        let Ok(answer) = serde_json::from_slice::<Value>(&self.kept) else { return 0 };
        self.done = true;
        self.model = answer.get("model").and_then(Value::as_str).map(str::to_owned);
        let Some(usage) = answer.get("usage") else { return 0 };
        self.read_input(usage);
        self.output = number(usage, "output_tokens");
        self.input + self.output
    }

    fn push_events(&mut self, bytes: &[u8]) -> u64 {
        let mut added = 0;
        for &byte in bytes {
            if byte != b'\n' {
                if self.kept.len() < MAX_KEPT {
                    self.kept.push(byte);
                }
                continue;
            }
            let line = std::mem::take(&mut self.kept);
            added += self.event_line(&line);
        }
        added
    }

    fn event_line(&mut self, line: &[u8]) -> u64 {
        let Some(data) = line.strip_prefix(b"data:") else { return 0 };
        let Ok(event) = serde_json::from_slice::<Value>(data) else { return 0 };
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                let message = event.get("message");
                self.model = message.and_then(|m| m.get("model")).and_then(Value::as_str).map(str::to_owned);
                let Some(usage) = message.and_then(|m| m.get("usage")) else { return 0 };
                self.output = number(usage, "output_tokens");
                self.read_input(usage);
                self.input + self.output
            }
            Some("message_delta") => {
                let Some(usage) = event.get("usage") else { return 0 };
                let total = number(usage, "output_tokens");
                let added = total.saturating_sub(self.output);
                self.output = self.output.max(total);
                added
            }
            _ => 0,
        }
    }
}

fn number(usage: &Value, field: &str) -> u64 {
    usage.get(field).and_then(Value::as_u64).unwrap_or(0)
}

fn input(usage: &Value) -> u64 {
    number(usage, "input_tokens") + number(usage, "cache_creation_input_tokens") + number(usage, "cache_read_input_tokens")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_answers_count_once_even_when_split() {
        let mut counter = Counter::new(Format::Json);
        let body = br#"{"type":"message","usage":{"input_tokens":10,"output_tokens":5,"cache_read_input_tokens":2}}"#;
        let (a, b) = body.split_at(20);
        assert_eq!(counter.push(a) + counter.push(b), 17);
        assert_eq!(counter.push(b" "), 0);
    }

    #[test]
    fn streams_count_input_and_the_running_output_total() {
        let mut counter = Counter::new(Format::EventStream);
        let stream = concat!(
            "event: message_start\n",
            "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n",
            "event: content_block_delta\n",
            "data: {\"type\":\"content_block_delta\"}\n\n",
            "event: message_delta\n",
            "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":12}}\n\n",
        );
        let total: u64 = stream.as_bytes().chunks(7).map(|c| counter.push(c)).sum();
        assert_eq!(total, 42);
        assert_eq!(counter.spent(), (None, TokenCounts { input: 30, output: 12, cache_read: 0, cache_write: 0 }));
    }
}
