//! A client of the API under test: JSON calls with one tenant's key,
//! answered as status and body, and Server-Sent Events read to the end.

use std::time::Duration;

use serde_json::Value;

use crate::fleet::ApiServer;
use crate::sse::{SseFrame, SseReader};

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

    /// A client of `api` that sends `key`, once `api` answers `/readyz`
    /// with 200 (within 10 s).
    pub async fn when_ready(api: &ApiServer, key: &str) -> Self {
        let client = Self::new(api, key);
        for _ in 0..500 {
            if client.get("/readyz").await.0 == 200 {
                return client;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the api never became ready");
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
        let response = self.open_events(path).await;
        until_closed(path, response, limit).await
    }

    /// Opens an event stream. The server answers once it has fixed where the
    /// stream starts, so every event after this returns reaches it: the
    /// signal that a stream is subscribed.
    pub async fn open_events(&self, path: &str) -> reqwest::Response {
        let response = self.http.get(self.url(path)).bearer_auth(&self.key).send().await.expect("open event stream");
        assert_eq!(response.status().as_u16(), 200, "event stream of {path}");
        response
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

/// Reads an opened event stream (see [`ApiClient::open_events`]) until the
/// server closes it, or panics after `limit`.
pub async fn until_closed(path: &str, response: reqwest::Response, limit: Duration) -> Vec<SseFrame> {
    let read = SseReader::new(response, limit).rest_owned();
    tokio::time::timeout(limit, read).await.unwrap_or_else(|_| panic!("{path} did not close within {limit:?}"))
}
