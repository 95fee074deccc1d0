//! A client of the API under test: JSON calls with one tenant's key,
//! answered as status and body, and Server-Sent Events read to the end.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use crate::fleet::ApiServer;

/// One Server-Sent Event: its `event` name and its `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseFrame {
    pub event: Option<String>,
    pub data: String,
}

/// Calls the API as one tenant.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl ApiClient {
    /// A client of `api` that sends `key`.
    pub fn new(api: &ApiServer, key: &str) -> Self {
        Self { http: reqwest::Client::new(), base: api.base_url.clone(), key: key.to_owned() }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(self.http.post(self.url(path)).json(body)).await
    }

    /// `POST` with no body.
    pub async fn post_empty(&self, path: &str) -> (u16, Value) {
        self.send(self.http.post(self.url(path))).await
    }

    pub async fn patch(&self, path: &str, body: &Value) -> (u16, Value) {
        self.send(self.http.patch(self.url(path)).json(body)).await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.http.delete(self.url(path))).await
    }

    /// Opens an event stream and reads it until the server closes it,
    /// failing if that takes longer than `limit`.
    pub async fn events_until_closed(&self, path: &str, limit: Duration) -> Vec<SseFrame> {
        let response = self.http.get(self.url(path)).bearer_auth(&self.key).send().await.expect("open event stream");
        assert_eq!(response.status().as_u16(), 200, "event stream of {path}");
        let mut body = response.bytes_stream();
        let mut buffer = String::new();
        let mut frames = Vec::new();
        let read = async {
            while let Some(chunk) = body.next().await {
                buffer.push_str(std::str::from_utf8(&chunk.expect("body chunk")).expect("utf-8"));
                while let Some(end) = buffer.find("\n\n") {
                    let block: String = buffer.drain(..end + 2).collect();
                    frames.extend(parse_block(&block));
                }
            }
        };
        tokio::time::timeout(limit, read).await.unwrap_or_else(|_| panic!("{path} did not close within {limit:?}"));
        frames
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.bearer_auth(&self.key).send().await.expect("request reaches the api");
        let status = response.status().as_u16();
        let text = response.text().await.expect("body");
        let body = if text.trim().is_empty() { Value::Null } else { serde_json::from_str(&text).expect("a JSON body") };
        (status, body)
    }
}

/// One block of lines; `None` for comment-only blocks (keep-alives).
fn parse_block(block: &str) -> Option<SseFrame> {
    let mut frame = SseFrame { event: None, data: String::new() };
    let mut has_data = false;
    for line in block.lines() {
        let (field, value) = line.split_once(": ").unwrap_or((line, ""));
        match field {
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
