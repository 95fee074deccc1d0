//! Reading Server-Sent Events from a response, frame by frame, as a client
//! would: blocks split on a blank line, `id`, `event` and (multi-line) `data`
//! fields, comment-only blocks (keep-alives) skipped.

use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;

/// One dispatched Server-Sent Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

/// Reads frames from an SSE response body; each wait for more bytes may
/// take at most `step`, so a stalled stream fails the test instead of
/// hanging it.
pub struct SseReader {
    body: BoxStream<'static, reqwest::Result<Vec<u8>>>,
    buffer: String,
    step: Duration,
}

impl SseReader {
    pub fn new(response: reqwest::Response, step: Duration) -> Self {
        let body = response.bytes_stream().map(|chunk| chunk.map(|b| b.to_vec())).boxed();
        Self { body, buffer: String::new(), step }
    }

    /// The next event, or `None` once the server has closed the stream.
    pub async fn next(&mut self) -> Option<SseFrame> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                if let Some(frame) = parse_block(&block) {
                    return Some(frame);
                }
            }
            let chunk = tokio::time::timeout(self.step, self.body.next()).await.expect("the stream stalled")?;
            self.buffer.push_str(std::str::from_utf8(&chunk.expect("body chunk")).expect("utf-8 body"));
        }
    }

    /// Everything left in the body as text, up to its end or a broken
    /// connection, whichever comes first.
    pub async fn remaining_text(&mut self) -> String {
        let mut text = std::mem::take(&mut self.buffer);
        while let Some(Ok(chunk)) = self.body.next().await {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
        text
    }

    /// Every remaining event, reading from a reader the caller gives away.
    pub async fn rest_owned(mut self) -> Vec<SseFrame> {
        self.rest().await
    }

    /// Every remaining event, checking that the server closes the stream.
    pub async fn rest(&mut self) -> Vec<SseFrame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            frames.push(frame);
        }
        frames
    }
}

/// One block of lines; `None` for comment-only blocks (keep-alives).
fn parse_block(block: &str) -> Option<SseFrame> {
    let mut frame = SseFrame { id: None, event: None, data: String::new() };
    let mut has_data = false;
    for line in block.lines() {
        let (field, value) = line.split_once(": ").unwrap_or((line, ""));
        match field {
            "id" => frame.id = Some(value.to_owned()),
            "event" => frame.event = Some(value.to_owned()),
            "data" => {
                if has_data {
                    frame.data.push('\n');
                }
                frame.data.push_str(value);
                has_data = true;
            }
            _ => {}
        }
    }
    has_data.then_some(frame)
}
