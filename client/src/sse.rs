//! A small Server-Sent Events parser, fed raw body chunks as they arrive.
//!
//! It follows the WHATWG event-stream rules the API relies on: lines end in
//! `\n`, `\r\n` or `\r` (even when a chunk splits the pair), `data:` lines
//! join with `\n`, lines starting with `:` are comments (keep-alives), a blank
//! line dispatches the event, and the last `id:` seen carries over to later
//! events. A line may span chunks, so bytes are buffered until its end and
//! decoded then, which keeps multi-byte characters whole.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The last event id the stream set, if any.
    pub id: Option<String>,
    /// The `event:` name, if the server gave one.
    pub event: Option<String>,
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous byte was `\r`, so a following `\n` belongs to the same line end.
    after_cr: bool,
    data: String,
    has_data: bool,
    event: Option<String>,
    last_id: Option<String>,
}

impl SseParser {
    /// Feeds bytes and returns the events they complete.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut events = Vec::new();
        for &byte in chunk {
            match byte {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    events.extend(self.end_line());
                }
                _ => {
                    self.after_cr = false;
                    self.line.push(byte);
                }
            }
        }
        events
    }

    fn end_line(&mut self) -> Option<SseEvent> {
        let bytes = std::mem::take(&mut self.line);
        let line = String::from_utf8_lossy(&bytes);
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !std::mem::take(&mut self.has_data) {
            return None;
        }
        let data = std::mem::take(&mut self.data);
        Some(SseEvent { id: self.last_id.clone(), event, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: Option<&str>, data: &str) -> SseEvent {
        SseEvent { id: id.map(str::to_owned), event: None, data: data.to_owned() }
    }

    fn parse_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::default();
        chunks.iter().flat_map(|chunk| parser.push(chunk)).collect()
    }

    #[test]
    fn reads_events_with_ids_and_comments() {
        let stream = b": keep-alive\n\nid: 1\ndata: {\"seq\":1}\n\nid:2\ndata:{\"seq\":2}\n\n";
        assert_eq!(parse_all(&[stream]), vec![event(Some("1"), "{\"seq\":1}"), event(Some("2"), "{\"seq\":2}")]);
    }

    #[test]
    fn handles_crlf_and_lone_cr_even_across_chunks() {
        let events = parse_all(&[b"id: 7\r", b"\ndata: a\r\n\r", b"\ndata: b\r\r"]);
        assert_eq!(events, vec![event(Some("7"), "a"), event(Some("7"), "b")]);
    }

    #[test]
    fn joins_multi_line_data_and_keeps_the_event_name() {
        let events = parse_all(&[b"event: progress\ndata: one\ndata\ndata:  three\n\n"]);
        assert_eq!(events, vec![SseEvent { id: None, event: Some("progress".into()), data: "one\n\n three".into() }]);
    }

    #[test]
    fn lines_and_characters_split_across_chunks_stay_whole() {
        let text = "data: caf\u{e9}\n\n".as_bytes();
        let (head, tail) = text.split_at(10);
        assert_eq!(parse_all(&[&head[..3], &head[3..], tail]), vec![event(None, "caf\u{e9}")]);
    }

    #[test]
    fn nothing_is_dispatched_without_data_or_a_blank_line() {
        assert!(parse_all(&[b"id: 3\nevent: x\n\n"]).is_empty());
        assert!(parse_all(&[b"data: unfinished\n"]).is_empty());
        let events = parse_all(&[b"id: 3\n\ndata: later\n\n"]);
        assert_eq!(events, vec![event(Some("3"), "later")], "the id carries over");
    }
}
