//! Local stand-ins for the hosted APIs the fleet calls (model providers,
//! sandbox control planes), speaking their real wire formats on a loopback
//! port. A test scripts the answers in order and reads back every request
//! the fleet sent, headers and body included. A model server started with
//! a [`billing::Biller`] writes into each answer the usage its provider
//! would bill for the request, prompt caching included.

pub mod anthropic;
pub mod billing;
pub mod gemini;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode};
use axum::response::Response;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub mod openai;

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: ReplyBody,
    /// How long to wait before answering (to provoke client timeouts).
    pub delay: Duration,
    /// A gate the answer waits for: the test looks at the fleet while the
    /// model call is under way, then opens it.
    pub gate: Option<Gate>,
}

/// A gate a scripted answer waits behind until the test opens it.
#[derive(Debug, Clone)]
pub struct Gate(Arc<tokio::sync::Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::Semaphore::new(0)))
    }

    /// Lets every answer waiting behind the gate go.
    pub fn open(&self) {
        self.0.add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    }

    async fn passed(&self) {
        let _ = self.0.acquire().await;
    }
}

#[derive(Debug, Clone)]
pub enum ReplyBody {
    Json(Value),
    /// Server-sent events: `(event name, data)` pairs, each sent as
    /// `event: name\ndata: data\n\n`.
    Sse(Vec<(String, String)>),
    /// Bytes as they are, e.g. a deliberately broken answer.
    Raw(String),
}

impl Reply {
    pub fn json(body: Value) -> Self {
        Self::status_json(200, body)
    }

    pub fn status_json(status: u16, body: Value) -> Self {
        Self { status, headers: Vec::new(), body: ReplyBody::Json(body), delay: Duration::ZERO, gate: None }
    }

    pub fn sse(events: Vec<(String, String)>) -> Self {
        Self { status: 200, headers: Vec::new(), body: ReplyBody::Sse(events), delay: Duration::ZERO, gate: None }
    }

    pub fn raw(status: u16, text: &str) -> Self {
        Self { status, headers: Vec::new(), body: ReplyBody::Raw(text.to_owned()), delay: Duration::ZERO, gate: None }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn after(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// The answer waits until `gate` is opened.
    pub fn behind(mut self, gate: &Gate) -> Self {
        self.gate = Some(gate.clone());
        self
    }
}

/// A request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: Method,
    /// Path and query, e.g. `/v1/responses`.
    pub path: String,
    pub headers: HeaderMap,
    /// The body as JSON, or `Value::Null` when it was empty or not JSON.
    pub body: Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    /// Replies for the requests whose body holds a tag, by tag: several
    /// conversations scripted at once, each answered in its own order.
    routed: Vec<(String, VecDeque<Reply>)>,
    received: Vec<Recorded>,
    /// Replies sent so far.
    answered: usize,
    /// Bills the answers as the provider would, when set.
    biller: Option<billing::Biller>,
    /// What each billed request was billed, in order.
    bills: Vec<billing::Bill>,
}

/// A scripted HTTP server on a free loopback port, stopped when dropped.
/// Each request takes the next scripted reply; when none is left it gets a
/// `500` saying so, which the test then sees as a failure.
pub struct ScriptedServer {
    pub addr: SocketAddr,
    script: Arc<Mutex<Script>>,
    stop: CancellationToken,
}

impl ScriptedServer {
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// A server that bills each answer as `biller`'s provider would.
    pub async fn start_billing(biller: billing::Biller) -> Self {
        Self::start_with(Some(biller)).await
    }

    async fn start_with(biller: Option<billing::Biller>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let script = Arc::new(Mutex::new(Script { biller, ..Script::default() }));
        let app = axum::Router::new().fallback(answer).with_state(Arc::clone(&script));
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, app).with_graceful_shutdown(stopped.cancelled_owned()).await.ok();
        });
        Self { addr, script, stop }
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues replies, answered in order.
    pub fn push(&self, reply: Reply) -> &Self {
        lock(&self.script).replies.push_back(reply);
        self
    }

    /// Queues a reply for the requests whose JSON body holds `tag`
    /// anywhere (a prompt, a response id): each tag's replies are answered
    /// in order, apart from the others' and from [`push`](Self::push)'s.
    pub fn push_tagged(&self, tag: &str, reply: Reply) -> &Self {
        let mut script = lock(&self.script);
        match script.routed.iter_mut().find(|(known, _)| known == tag) {
            Some((_, replies)) => replies.push_back(reply),
            None => script.routed.push((tag.to_owned(), VecDeque::from([reply]))),
        }
        drop(script);
        self
    }

    /// Every request received so far, in order.
    pub fn received(&self) -> Vec<Recorded> {
        lock(&self.script).received.clone()
    }

    /// How many replies have been sent (after their delay), scripted or not.
    pub fn answered(&self) -> usize {
        lock(&self.script).answered
    }

    /// What each billed request was billed, in order.
    pub fn bills(&self) -> Vec<billing::Bill> {
        lock(&self.script).bills.clone()
    }

    /// Moves the billing cache's clock on by `by` (entries past their time
    /// to live expire).
    pub fn advance_cache_clock(&self, by: Duration) {
        if let Some(biller) = lock(&self.script).biller.as_mut() {
            biller.advance(by);
        }
    }

    /// How many scripted replies are still unused.
    pub fn remaining(&self) -> usize {
        lock(&self.script).replies.len()
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Script {
    /// `reply` with the usage the biller works out for `request` (a
    /// successful JSON answer only), or the error the API would answer.
    fn billed(&mut self, request: &Value, mut reply: Reply) -> Reply {
        let (Some(biller), 200, ReplyBody::Json(answer)) = (self.biller.as_mut(), reply.status, &mut reply.body) else {
            return reply;
        };
        match biller.bill(request, answer) {
            Ok(bill) => {
                self.bills.push(bill);
                reply
            }
            Err(error) => Reply::status_json(400, error),
        }
    }
}

fn lock(script: &Mutex<Script>) -> std::sync::MutexGuard<'_, Script> {
    script.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

async fn answer(State(script): State<Arc<Mutex<Script>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20).await.unwrap_or_default();
    let recorded = Recorded {
        method: parts.method,
        path: parts.uri.path_and_query().map(|p| p.as_str().to_owned()).unwrap_or_default(),
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    };
    let reply = {
        let mut script = lock(&script);
        let body = recorded.body.clone();
        script.received.push(recorded);
        let text = body.to_string();
        let reply = match script.routed.iter_mut().find(|(tag, _)| text.contains(tag.as_str())) {
            Some((_, replies)) => replies.pop_front(),
            None => script.replies.pop_front(),
        };
        reply.map(|reply| script.billed(&body, reply))
    };
    let reply = reply.unwrap_or_else(|| {
        Reply::status_json(500, serde_json::json!({"error": {"message": "the fake server's script has no reply left"}}))
    });
    if let Some(gate) = &reply.gate {
        gate.passed().await;
    }
    if !reply.delay.is_zero() {
        // The scripted delay is the fake's behaviour (a slow model), not a wait.
        tokio::time::sleep(reply.delay).await;
    }
    lock(&script).answered += 1;
    render(reply)
}

fn render(reply: Reply) -> Response {
    let (content_type, body) = match reply.body {
        ReplyBody::Json(value) => ("application/json", Bytes::from(value.to_string())),
        ReplyBody::Sse(events) => {
            let text: String = events.iter().map(|(event, data)| format!("event: {event}\ndata: {data}\n\n")).collect();
            ("text/event-stream", Bytes::from(text))
        }
        ReplyBody::Raw(text) => ("text/plain", Bytes::from(text)),
    };
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    response.headers_mut().insert("content-type", HeaderValue::from_static(content_type));
    for (name, value) in reply.headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name), HeaderValue::try_from(value)) {
            response.headers_mut().insert(name, value);
        }
    }
    response
}
