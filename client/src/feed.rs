//! One task's progress events, read from `GET /v1/tasks/{id}/events`.
//!
//! The server replays the stored history, follows live and closes after the
//! terminal event. When the connection drops before that, the feed reconnects
//! with `Last-Event-ID` set to the last `seq` it saw, a few times with growing
//! delays; events at or below that `seq` are skipped, so none is shown twice
//! even if a server replays more than it was asked to.

use std::collections::VecDeque;
use std::time::Duration;

use reqwest::Response;
use serde_json::Value;

use crate::sse::{SseEvent, SseParser};
use crate::{Client, ClientError};

/// Event types after which the server closes the stream.
pub const TERMINAL_TYPES: [&str; 3] = ["succeeded", "failed", "cancelled"];

/// How hard to try to get a dropped stream back.
#[derive(Debug, Clone, Copy)]
pub struct Reconnect {
    pub first_delay: Duration,
    pub max_delay: Duration,
    /// Reconnections in a row without receiving an event.
    pub tries: u32,
}

impl Default for Reconnect {
    fn default() -> Self {
        Self { first_delay: Duration::from_millis(500), max_delay: Duration::from_secs(8), tries: 5 }
    }
}

impl Reconnect {
    fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.saturating_pow(failures.min(16));
        self.first_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// One progress event: its JSON as sent and parsed.
#[derive(Debug, Clone)]
pub struct TaskEvent {
    pub raw: String,
    pub value: Value,
}

impl TaskEvent {
    /// The event's `type`, or `""`.
    pub fn kind(&self) -> &str {
        self.value.get("type").and_then(Value::as_str).unwrap_or("")
    }

    pub fn is_terminal(&self) -> bool {
        TERMINAL_TYPES.contains(&self.kind())
    }
}

/// A reconnecting reader of one task's events.
pub struct EventFeed<'a> {
    client: &'a Client,
    task_id: String,
    reconnect: Reconnect,
    response: Option<Response>,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    last_seq: Option<u64>,
    connected_once: bool,
    failures: u32,
    finished: bool,
}

impl<'a> EventFeed<'a> {
    pub fn new(client: &'a Client, task_id: &str, reconnect: Reconnect) -> Self {
        Self {
            client,
            task_id: task_id.to_owned(),
            reconnect,
            response: None,
            parser: SseParser::default(),
            pending: VecDeque::new(),
            last_seq: None,
            connected_once: false,
            failures: 0,
            finished: false,
        }
    }

    /// The next event, or `None` once the terminal event has been returned.
    pub async fn next(&mut self) -> Result<Option<TaskEvent>, ClientError> {
        loop {
            if let Some(event) = self.take_pending() {
                return Ok(Some(event));
            }
            if self.finished {
                return Ok(None);
            }
            self.read_more().await?;
        }
    }

    /// Takes the first buffered event that is new and JSON.
    fn take_pending(&mut self) -> Option<TaskEvent> {
        while let Some(sse) = self.pending.pop_front() {
            let Ok(value) = serde_json::from_str::<Value>(&sse.data) else {
                continue;
            };
            let seq = value.get("seq").and_then(Value::as_u64).or_else(|| sse.id.as_deref()?.trim().parse().ok());
            if let (Some(seq), Some(last)) = (seq, self.last_seq) {
                if seq <= last {
                    continue;
                }
            }
            self.last_seq = seq.or(self.last_seq);
            self.failures = 0;
            let event = TaskEvent { raw: sse.data, value };
            if event.is_terminal() {
                self.finished = true;
                self.pending.clear();
                self.response = None;
            }
            return Some(event);
        }
        None
    }

    async fn read_more(&mut self) -> Result<(), ClientError> {
        let Some(response) = self.response.as_mut() else {
            return self.connect().await;
        };
        match response.chunk().await {
            Ok(Some(bytes)) => {
                let events = self.parser.push(&bytes);
                self.pending.extend(events);
                Ok(())
            }
            Ok(None) => {
                self.response = None;
                self.back_off(ClientError::StreamEnded).await
            }
            Err(err) => {
                self.response = None;
                let err = self.client.transport_error(&err);
                self.back_off(err).await
            }
        }
    }

    async fn connect(&mut self) -> Result<(), ClientError> {
        let path = ["v1", "tasks", self.task_id.as_str(), "events"];
        match self.client.open_events(&path, self.last_seq).await {
            Ok(response) => {
                self.response = Some(response);
                self.parser = SseParser::default();
                self.connected_once = true;
                Ok(())
            }
            Err(err) if self.connected_once && err.is_transient() => self.back_off(err).await,
            Err(err) => Err(err),
        }
    }

    /// Waits before the next connection, or gives up with `err` when out of tries.
    async fn back_off(&mut self, err: ClientError) -> Result<(), ClientError> {
        if self.failures >= self.reconnect.tries {
            return Err(err);
        }
        let delay = self.reconnect.delay(self.failures);
        self.failures += 1;
        tokio::time::sleep(delay).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApiKey;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    const QUICK: Reconnect = Reconnect { first_delay: Duration::from_millis(5), max_delay: Duration::from_millis(20), tries: 3 };

    fn event(seq: u64, kind: &str) -> String {
        format!("id: {seq}\ndata: {{\"task_id\":\"tsk_1\",\"seq\":{seq},\"type\":\"{kind}\"}}\n\n")
    }

    /// Reads one request's head and answers it with `response`, then closes.
    async fn answer(stream: &mut TcpStream, response: &str) -> String {
        let mut head = Vec::new();
        let mut buf = [0u8; 1024];
        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = stream.read(&mut buf).await.expect("read request");
            if n == 0 {
                break;
            }
            head.extend_from_slice(&buf[..n]);
        }
        stream.write_all(response.as_bytes()).await.expect("write response");
        stream.shutdown().await.ok();
        String::from_utf8_lossy(&head).to_lowercase()
    }

    fn sse_response(body: &str) -> String {
        format!("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n{body}")
    }

    async fn server() -> (TcpListener, Client) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        (listener, Client::new(&url, ApiKey::parse("k").ok()).expect("client"))
    }

    async fn collect(feed: &mut EventFeed<'_>) -> Result<Vec<u64>, ClientError> {
        let mut seqs = Vec::new();
        while let Some(event) = feed.next().await? {
            seqs.push(event.value["seq"].as_u64().unwrap_or(0));
        }
        Ok(seqs)
    }

    #[tokio::test]
    async fn a_dropped_stream_resumes_after_the_last_seq() {
        let (listener, client) = server().await;
        let server = tokio::spawn(async move {
            let (mut first, _) = listener.accept().await.expect("accept");
            let first_head = answer(&mut first, &sse_response(&(event(1, "queued") + &event(2, "started")))).await;
            let (mut second, _) = listener.accept().await.expect("accept");
            let body = event(2, "started") + &event(3, "succeeded");
            let second_head = answer(&mut second, &sse_response(&body)).await;
            (first_head, second_head)
        });
        let mut feed = EventFeed::new(&client, "tsk_1", QUICK);
        assert_eq!(collect(&mut feed).await.expect("events"), vec![1, 2, 3]);
        let (first_head, second_head) = server.await.expect("server");
        assert!(first_head.starts_with("get /v1/tasks/tsk_1/events "), "{first_head}");
        assert!(first_head.contains("authorization: bearer k"));
        assert!(!first_head.contains("last-event-id"));
        assert!(second_head.contains("last-event-id: 2"), "{second_head}");
    }

    #[tokio::test]
    async fn an_api_error_is_returned_without_retrying() {
        let (listener, client) = server().await;
        tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("accept");
            let body = r#"{"error":{"code":"not_found","message":"no such task"}}"#;
            let response = format!(
                "HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            answer(&mut stream, &response).await;
        });
        let mut feed = EventFeed::new(&client, "tsk_1", QUICK);
        let err = collect(&mut feed).await.expect_err("404");
        assert_eq!(err.to_string(), "not_found: no such task");
    }

    #[tokio::test]
    async fn reconnecting_gives_up_after_a_few_tries() {
        let (listener, client) = server().await;
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                answer(&mut stream, &sse_response(": nothing yet\n\n")).await;
            }
        });
        let mut feed = EventFeed::new(&client, "tsk_1", QUICK);
        let err = collect(&mut feed).await.expect_err("gives up");
        assert!(err.to_string().contains("closed before the task finished"), "{err}");
    }

    #[test]
    fn delays_grow_and_are_capped() {
        let reconnect = Reconnect::default();
        assert_eq!(reconnect.delay(0), Duration::from_millis(500));
        assert_eq!(reconnect.delay(2), Duration::from_secs(2));
        assert_eq!(reconnect.delay(30), Duration::from_secs(8));
    }
}
