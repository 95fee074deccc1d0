//! The browser a `browser` task drives: Chromium inside the task's sandbox,
//! reached over the DevTools protocol ([`cdp`]) through the provider's relay
//! to the sandbox's own loopback
//! ([`SandboxProvider::open_port`](crate::sandbox::SandboxProvider::open_port)).
//! The debugging port is bound inside the sandbox's network only; the
//! worker never connects to it over a network of its own, and nothing on
//! the host listens for it.
//!
//! [`Browser::attach`] asks the browser's `/json/version` on port 9222 (where
//! the `browser` template starts Chromium with `--remote-debugging-port`,
//! profile in `~/.config/chromium`) for its WebSocket, over the same relay;
//! on a template without a browser it starts Chromium the same way first.
//! It then
//! drives the first page tab: screenshots of the viewport
//! (`Page.captureScreenshot`), screen actions as input events ([`input`]),
//! and the browser calls models make ([`BrowserCall`]) through
//! `Page.navigate`, the history, and a page script (`page.js`, beside this
//! file) that keeps element references for reading, filling and clicking.

pub mod cdp;
pub mod input;

use std::time::{Duration, Instant};

use bytes::Bytes;
use flotilla_types::action::Action;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use self::cdp::{Cdp, CdpError};
use self::input::InputEvent;
use crate::model::browser::{BrowserCall, PageState};
use crate::sandbox::{SandboxError, SandboxId, SandboxProvider, Screenshot};

/// Chromium's profile in the sandbox's home.
pub const PROFILE_DIR: &str = ".config/chromium";
/// The debugging port the `browser` template opens inside the sandbox.
pub const DEBUGGING_PORT: u16 = 9222;
/// What the browser answers a capture while its page has no document.
const NO_PAGE_YET: &str = "Not attached to an active page";
/// How often such a capture is asked again, and the pause between.
const CAPTURE_TRIES: u32 = 20;
const CAPTURE_RETRY_PAUSE: Duration = Duration::from_millis(50);
/// How long the browser may take to start and open its port.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a page may take to load before the call goes on without it.
const LOAD_TIMEOUT: Duration = Duration::from_secs(15);
/// How often the port is tried while the browser starts.
const START_POLL: Duration = Duration::from_millis(100);
/// The page script, called as `(script)(op, arg)`.
const PAGE_SCRIPT: &str = include_str!("page.js");

/// Why a browser call failed.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// The call cannot be done as asked (a page that does not load, a stale
    /// reference): the model is told, the task goes on.
    #[error("{0}")]
    Refused(String),
    /// The browser or the way to it broke.
    #[error("the browser is unreachable: {0}")]
    Broken(String),
}

impl From<CdpError> for BrowserError {
    fn from(error: CdpError) -> Self {
        match error {
            CdpError::Refused { method, message } => Self::Refused(format!("{method} failed: {message}")),
            other => Self::Broken(other.to_string()),
        }
    }
}

impl From<SandboxError> for BrowserError {
    fn from(error: SandboxError) -> Self {
        Self::Broken(error.to_string())
    }
}

/// One page tab of the sandbox's Chromium, attached over DevTools.
pub struct Browser {
    cdp: Cdp,
    /// The flat-mode session of the attached page.
    session: String,
    /// Where the pointer is, in viewport pixels.
    pointer: (u32, u32),
}

impl Browser {
    /// Attaches to the Chromium of sandbox `id`, starting it when the
    /// sandbox has none.
    pub async fn attach(provider: &dyn SandboxProvider, id: &SandboxId) -> Result<Self, BrowserError> {
        let path = match debugger_path(provider, id).await {
            Some(path) => path,
            None => start(provider, id).await?,
        };
        let stream = provider.open_port(id, DEBUGGING_PORT).await?;
        let cdp = Cdp::connect(&format!("ws://127.0.0.1:{DEBUGGING_PORT}{path}"), stream).await?;
        let session = attach_page(&cdp).await?;
        let browser = Self { cdp, session, pointer: (0, 0) };
        browser.call("Page.enable", json!({})).await?;
        browser.call("Page.setLifecycleEventsEnabled", json!({"enabled": true})).await?;
        Ok(browser)
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, CdpError> {
        self.cdp.call(Some(&self.session), method, params).await
    }

    /// The viewport as a PNG. A page caught between two documents (a
    /// navigation swapping its renderer) has none for a moment: the
    /// capture is asked again, a bounded number of times.
    pub async fn screenshot(&self) -> Result<Screenshot, BrowserError> {
        let mut tries = 0;
        let shot = loop {
            match self.call("Page.captureScreenshot", json!({"format": "png"})).await {
                Err(CdpError::Refused { message, .. }) if message.contains(NO_PAGE_YET) && tries < CAPTURE_TRIES => {
                    tries += 1;
                    tokio::time::sleep(CAPTURE_RETRY_PAUSE).await;
                }
                answer => break answer?,
            }
        };
        let data = shot["data"].as_str().ok_or_else(|| BrowserError::Broken("a screenshot without data".into()))?;
        let png = base64::Engine::decode(&base64::prelude::BASE64_STANDARD, data)
            .map_err(|e| BrowserError::Broken(format!("a screenshot that is not base64: {e}")))?;
        let (width, height) = png_size(&png).ok_or_else(|| BrowserError::Broken("a screenshot that is not a PNG".into()))?;
        Ok(Screenshot { png: Bytes::from(png), width, height, rgb: None })
    }

    /// Performs a screen action in viewport pixels.
    pub async fn act(&mut self, action: &Action) -> Result<(), BrowserError> {
        let events = input::events(action, self.pointer).map_err(BrowserError::Refused)?;
        for event in events {
            match event {
                InputEvent::Mouse(params) => self.call("Input.dispatchMouseEvent", params).await.map(drop)?,
                InputEvent::Key(params) => self.call("Input.dispatchKeyEvent", params).await.map(drop)?,
                InputEvent::Text(text) => self.call("Input.insertText", json!({"text": text})).await.map(drop)?,
                InputEvent::Pause(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
            }
        }
        if let Some(pointer) = input::pointer_after(action) {
            self.pointer = pointer;
        }
        Ok(())
    }

    /// Carries out a browser call; returns what the model is told.
    pub async fn browse(&mut self, call: &BrowserCall) -> Result<String, BrowserError> {
        match call {
            BrowserCall::Navigate { url } => self.navigate(url).await,
            BrowserCall::Back => self.history(-1).await,
            BrowserCall::Forward => self.history(1).await,
            BrowserCall::Reload => {
                let loaded = self.cdp.subscribe();
                self.call("Page.reload", json!({})).await?;
                wait_for_load(loaded, &self.session, None).await;
                self.arrived("Reloaded").await
            }
            BrowserCall::ReadPage { filter } => self.page("read", json!({ "filter": filter })).await.map(text_of),
            BrowserCall::Find { query } => self.page("find", json!(query)).await.map(text_of),
            BrowserCall::PageText => self.page("text", Value::Null).await.map(text_of),
            BrowserCall::FormInput { reference, value } => {
                self.page("input", json!({"ref": reference, "value": value})).await.map(text_of)
            }
            BrowserCall::ScrollTo { reference } => self.page("scroll", json!(reference)).await.map(text_of),
            BrowserCall::Click { reference, button, clicks } => {
                let (x, y) = self.element_point(reference).await?;
                let action = match clicks {
                    2 => Action::DoubleClick { x, y },
                    3 => Action::TripleClick { x, y },
                    _ => Action::Click { x, y, button: *button },
                };
                self.act(&action).await?;
                Ok("Clicked.".to_owned())
            }
            BrowserCall::Hover { reference } => {
                let (x, y) = self.element_point(reference).await?;
                self.act(&Action::Move { x, y }).await?;
                Ok("Hovered.".to_owned())
            }
            BrowserCall::ListTabs => {
                let page = self.state().await?;
                Ok(format!("One tab: {} — {}", page.url, page.title))
            }
        }
    }

    /// The page the tab shows now.
    pub async fn state(&self) -> Result<PageState, BrowserError> {
        let value = self.page("state", Value::Null).await?;
        let field = |index: usize| value.get(index).and_then(Value::as_str).unwrap_or_default().to_owned();
        Ok(PageState { url: field(0), title: field(1) })
    }

    async fn navigate(&self, url: &str) -> Result<String, BrowserError> {
        let url = if url.contains("://") || url.starts_with("about:") { url.to_owned() } else { format!("https://{url}") };
        let loaded = self.cdp.subscribe();
        let answer = self.call("Page.navigate", json!({ "url": url })).await?;
        if let Some(error) = answer.get("errorText").and_then(Value::as_str) {
            return Err(BrowserError::Refused(format!("{url} did not load: {error}")));
        }
        let loader = answer.get("loaderId").and_then(Value::as_str).map(str::to_owned);
        if loader.is_some() {
            wait_for_load(loaded, &self.session, loader.as_deref()).await;
        }
        self.arrived("Navigated to").await
    }

    /// Moves `step` entries through the tab's history.
    async fn history(&self, step: i64) -> Result<String, BrowserError> {
        let history = self.call("Page.getNavigationHistory", json!({})).await?;
        let current = history["currentIndex"].as_i64().unwrap_or(0);
        let entry = history["entries"].get(usize::try_from(current + step).unwrap_or(usize::MAX)).cloned();
        let Some(entry) = entry else {
            let way = if step < 0 { "back" } else { "forward" };
            return Err(BrowserError::Refused(format!("there is no page to go {way} to")));
        };
        let loaded = self.cdp.subscribe();
        self.call("Page.navigateToHistoryEntry", json!({"entryId": entry["id"]})).await?;
        wait_for_load(loaded, &self.session, None).await;
        self.arrived(if step < 0 { "Went back to" } else { "Went forward to" }).await
    }

    async fn arrived(&self, verb: &str) -> Result<String, BrowserError> {
        let page = self.state().await?;
        Ok(format!("{verb} {} — {}", page.url, page.title))
    }

    /// The centre of a referenced element, scrolled into view, in whole
    /// viewport pixels.
    async fn element_point(&self, reference: &str) -> Result<(u32, u32), BrowserError> {
        let point = self.page("point", json!(reference)).await?;
        let coordinate = |index: usize| point.get(index).and_then(Value::as_f64).map(|v| v.max(0.0).round() as u32);
        match (coordinate(0), coordinate(1)) {
            (Some(x), Some(y)) => Ok((x, y)),
            _ => Err(BrowserError::Broken(format!("the page gave no point for {reference}"))),
        }
    }

    /// Runs one operation of the page script; an exception it throws is a
    /// refusal the model hears.
    async fn page(&self, op: &str, arg: Value) -> Result<Value, BrowserError> {
        let expression = format!("({PAGE_SCRIPT})({}, {})", json!(op), arg);
        let answer = self.call("Runtime.evaluate", json!({"expression": expression, "returnByValue": true})).await?;
        if let Some(details) = answer.get("exceptionDetails") {
            let message = details
                .pointer("/exception/description")
                .and_then(Value::as_str)
                .or_else(|| details.get("text").and_then(Value::as_str))
                .unwrap_or("the page script failed");
            let first_line = message.lines().next().unwrap_or(message).trim_start_matches("Error: ");
            return Err(BrowserError::Refused(first_line.to_owned()));
        }
        Ok(answer.pointer("/result/value").cloned().unwrap_or(Value::Null))
    }
}

fn text_of(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}

/// The path of the browser's WebSocket (`/devtools/browser/<id>`), from
/// its `/json/version` asked over the relay; `None` when nothing answers.
async fn debugger_path(provider: &dyn SandboxProvider, id: &SandboxId) -> Option<String> {
    let mut stream = provider.open_port(id, DEBUGGING_PORT).await.ok()?;
    let request = format!("GET /json/version HTTP/1.1\r\nHost: 127.0.0.1:{DEBUGGING_PORT}\r\nConnection: close\r\n\r\n");
    let exchange = async {
        stream.write_all(request.as_bytes()).await.ok()?;
        // Read until the whole body is in: the browser keeps the
        // connection open whatever the request says.
        let mut answer = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let read = stream.read(&mut chunk).await.ok()?;
            answer.extend_from_slice(&chunk[..read]);
            if let Some(body) = complete_body(&answer) {
                return Some(body);
            }
            if read == 0 {
                return None;
            }
        }
    };
    let body = tokio::time::timeout(cdp::CALL_TIMEOUT, exchange).await.ok()??;
    let version: Value = serde_json::from_slice(&body).ok()?;
    let url = version.get("webSocketDebuggerUrl")?.as_str()?;
    let path = &url[url.find("/devtools/browser/")?..];
    Some(path.to_owned())
}

/// The body of an HTTP answer once all of it (its `Content-Length`) is in.
fn complete_body(answer: &[u8]) -> Option<Vec<u8>> {
    let end = answer.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let head = String::from_utf8_lossy(&answer[..end]).to_ascii_lowercase();
    let length: usize = head.lines().find_map(|line| line.strip_prefix("content-length:"))?.trim().parse().ok()?;
    let body = answer.get(end..end + length)?;
    Some(body.to_vec())
}

/// Starts Chromium in the sandbox as the `browser` template does and waits
/// for its debugging port to answer.
async fn start(provider: &dyn SandboxProvider, id: &SandboxId) -> Result<String, BrowserError> {
    let command = format!(
        "setsid chromium --no-sandbox --user-data-dir=\"$HOME/{PROFILE_DIR}\" --remote-debugging-port={DEBUGGING_PORT} \
         --remote-debugging-address=127.0.0.1 --no-first-run --no-default-browser-check --disable-gpu --ozone-platform=x11 \
         --start-maximized --password-store=basic --disable-background-networking --disable-component-update \
         --disable-sync --disable-features=Translate,MediaRouter --test-type about:blank \
         </dev/null >/dev/null 2>&1 &"
    );
    let output = provider.run(id, &command, Duration::from_secs(10)).await?;
    if !output.success() {
        return Err(BrowserError::Broken(format!("chromium did not start: {}", output.stderr.trim())));
    }
    let deadline = Instant::now() + START_TIMEOUT;
    while Instant::now() < deadline {
        if let Some(path) = debugger_path(provider, id).await {
            return Ok(path);
        }
        tokio::time::sleep(START_POLL).await;
    }
    Err(BrowserError::Broken(format!("chromium opened no debugging port within {START_TIMEOUT:?}")))
}

/// The flat session of the browser's first page tab, opening one if it has none.
async fn attach_page(cdp: &Cdp) -> Result<String, BrowserError> {
    let targets = cdp.call(None, "Target.getTargets", json!({})).await?;
    let page = targets["targetInfos"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["type"] == "page" && !t["url"].as_str().unwrap_or_default().starts_with("devtools://"))
        .and_then(|t| t["targetId"].as_str().map(str::to_owned));
    let target = match page {
        Some(target) => target,
        None => {
            let created = cdp.call(None, "Target.createTarget", json!({"url": "about:blank"})).await?;
            created["targetId"].as_str().map(str::to_owned).ok_or_else(|| BrowserError::Broken("no tab was opened".into()))?
        }
    };
    cdp.call(None, "Target.activateTarget", json!({"targetId": target})).await?;
    let attached = cdp.call(None, "Target.attachToTarget", json!({"targetId": target, "flatten": true})).await?;
    attached["sessionId"].as_str().map(str::to_owned).ok_or_else(|| BrowserError::Broken("no session for the tab".into()))
}

/// Waits, up to [`LOAD_TIMEOUT`], for the tab's page to load: the `load`
/// lifecycle event of `loader` when known, else the next load or stop of
/// the main frame. A page that never finishes is shown as it is.
async fn wait_for_load(mut events: tokio::sync::broadcast::Receiver<cdp::CdpEvent>, session: &str, loader: Option<&str>) {
    let done = async {
        loop {
            let Ok(event) = events.recv().await else { return };
            if event.session.as_deref() != Some(session) {
                continue;
            }
            let finished = match event.method.as_str() {
                "Page.lifecycleEvent" => event.params["name"] == "load" && loader.is_none_or(|id| event.params["loaderId"] == id),
                "Page.loadEventFired" | "Page.navigatedWithinDocument" => loader.is_none(),
                _ => false,
            };
            if finished {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(LOAD_TIMEOUT, done).await;
}

/// Width and height from a PNG's header.
fn png_size(png: &[u8]) -> Option<(u32, u32)> {
    if png.len() < 24 || !png.starts_with(b"\x89PNG\r\n\x1a\n") {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([png[at], png[at + 1], png[at + 2], png[at + 3]]);
    Some((word(16), word(20)))
}
