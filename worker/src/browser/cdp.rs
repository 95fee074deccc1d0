//! The Chrome DevTools Protocol over one WebSocket: commands carry an id
//! and are answered by id, everything else the browser sends is an event.
//! A reader task routes answers to their callers and events to every
//! subscriber; a command unanswered within [`CALL_TIMEOUT`] fails, and once
//! the socket closes every call fails at once with [`CdpError::Closed`].
//!
//! The socket runs over whatever byte stream it is given: the pipeline
//! gives it the provider's relay to the port inside the sandbox
//! ([`SandboxProvider::open_port`](crate::sandbox::SandboxProvider::open_port)),
//! so the handshake's `ws://127.0.0.1:<port>/…` URL names the sandbox's own
//! loopback, never the host's.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_tungstenite::tungstenite::Message;

use crate::sandbox::PortStream;

/// How long one command may take to be answered.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// Events kept for a subscriber that lags behind.
const EVENT_BUFFER: usize = 256;

/// Why a DevTools call failed.
#[derive(Debug, thiserror::Error)]
pub enum CdpError {
    #[error("the DevTools connection could not be opened: {0}")]
    Connect(String),
    #[error("the DevTools connection closed")]
    Closed,
    #[error("the browser did not answer {method} within {CALL_TIMEOUT:?}")]
    Timeout { method: String },
    #[error("the browser refused {method}: {message}")]
    Refused { method: String, message: String },
}

/// An event the browser sent unasked.
#[derive(Debug, Clone)]
pub struct CdpEvent {
    pub method: String,
    pub params: Value,
    /// The target session it belongs to (flat mode), if any.
    pub session: Option<String>,
}

type Waiting = Arc<Mutex<Option<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>>;

/// One DevTools connection.
pub struct Cdp {
    outgoing: mpsc::UnboundedSender<Message>,
    waiting: Waiting,
    events: broadcast::Sender<CdpEvent>,
    next_id: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
    writer: tokio::task::JoinHandle<()>,
}

impl Cdp {
    /// Opens the WebSocket at `url` over `stream`.
    pub async fn connect(url: &str, stream: PortStream) -> Result<Self, CdpError> {
        let handshake = tokio_tungstenite::client_async(url, stream);
        let (socket, _) = tokio::time::timeout(CALL_TIMEOUT, handshake)
            .await
            .map_err(|_| CdpError::Connect("the handshake timed out".into()))?
            .map_err(|e| CdpError::Connect(e.to_string()))?;
        let (mut sink, mut source) = socket.split();
        let (outgoing, mut queued) = mpsc::unbounded_channel::<Message>();
        let writer = tokio::spawn(async move {
            while let Some(message) = queued.recv().await {
                if sink.send(message).await.is_err() {
                    return;
                }
            }
        });
        let waiting: Waiting = Arc::new(Mutex::new(Some(HashMap::new())));
        let (events, _) = broadcast::channel(EVENT_BUFFER);
        let (answers, published) = (Arc::clone(&waiting), events.clone());
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = source.next().await {
                if let Message::Text(text) = message {
                    route(&text, &answers, &published);
                }
            }
            // Closed: every caller still waiting hears so.
            lock(&answers).take();
        });
        Ok(Self { outgoing, waiting, events, next_id: AtomicU64::new(1), reader, writer })
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<CdpEvent> {
        self.events.subscribe()
    }

    /// Sends `method` with `params` (to target `session` when given) and
    /// returns its result.
    pub async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value, CdpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (answer, answered) = oneshot::channel();
        match lock(&self.waiting).as_mut() {
            Some(waiting) => waiting.insert(id, answer),
            None => return Err(CdpError::Closed),
        };
        let mut command = json!({ "id": id, "method": method, "params": params });
        if let Some(session) = session {
            command["sessionId"] = json!(session);
        }
        if self.outgoing.send(Message::Text(command.to_string().into())).is_err() {
            return Err(CdpError::Closed);
        }
        let result = tokio::time::timeout(CALL_TIMEOUT, answered).await;
        if let Some(waiting) = lock(&self.waiting).as_mut() {
            waiting.remove(&id);
        }
        match result {
            Err(_) => Err(CdpError::Timeout { method: method.to_owned() }),
            Ok(Err(_)) => Err(CdpError::Closed),
            Ok(Ok(Err(message))) => Err(CdpError::Refused { method: method.to_owned(), message }),
            Ok(Ok(Ok(value))) => Ok(value),
        }
    }
}

impl Drop for Cdp {
    fn drop(&mut self) {
        self.reader.abort();
        self.writer.abort();
    }
}

/// Hands an answer to its caller or publishes an event.
fn route(text: &str, waiting: &Waiting, events: &broadcast::Sender<CdpEvent>) {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        tracing::warn!("the browser sent a message that is not JSON");
        return;
    };
    if let Some(id) = message.get("id").and_then(Value::as_u64) {
        let answer = match message.get("error") {
            Some(error) => Err(error.get("message").and_then(Value::as_str).unwrap_or("unknown error").to_owned()),
            None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
        };
        if let Some(caller) = lock(waiting).as_mut().and_then(|waiting| waiting.remove(&id)) {
            let _ = caller.send(answer);
        }
        return;
    }
    if let Some(method) = message.get("method").and_then(Value::as_str) {
        let event = CdpEvent {
            method: method.to_owned(),
            params: message.get("params").cloned().unwrap_or(Value::Null),
            session: message.get("sessionId").and_then(Value::as_str).map(str::to_owned),
        };
        // Nobody listening is fine: events matter only to a waiting caller.
        let _ = events.send(event);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
