//! A headless Chromium driven over the DevTools protocol, for tests of the
//! dashboard page.
//!
//! The protocol runs over the browser's pipe (`--remote-debugging-pipe`:
//! commands in on fd 3, answers out on fd 4, each JSON message ended by a NUL
//! byte), so no port is opened and no websocket client is needed. A shell
//! `exec` moves the child's stdin and stdout onto those descriptors. Calls are
//! made one at a time and events the browser sends unasked are skipped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use base64::prelude::{Engine as _, BASE64_STANDARD};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where Debian installs the browser; `FLOTILLA_CHROMIUM` overrides it.
const DEFAULT_CHROMIUM: &str = "/usr/bin/chromium";
/// How long one protocol call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How often [`Browser::wait_for`] asks again.
const POLL: Duration = Duration::from_millis(100);

/// A browser with one page open, killed when dropped.
pub struct Browser {
    child: Child,
    commands: ChildStdin,
    answers: BufReader<ChildStdout>,
    next_id: u64,
    session: Option<String>,
    profile: PathBuf,
}

/// The browser binary to run.
pub fn chromium_path() -> PathBuf {
    std::env::var_os("FLOTILLA_CHROMIUM").map_or_else(|| PathBuf::from(DEFAULT_CHROMIUM), PathBuf::from)
}

impl Browser {
    /// Starts a headless browser with a fresh profile and opens a blank page
    /// whose viewport is `width` × `height` CSS pixels at scale 1.
    pub async fn launch(width: u32, height: u32) -> anyhow::Result<Self> {
        let chromium = chromium_path();
        if !chromium.exists() {
            bail!("{} is missing: run scripts/setup.sh (it installs chromium)", chromium.display());
        }
        let profile = std::env::temp_dir().join(format!("flotilla-chromium-{}", ulid::Ulid::new()));
        std::fs::create_dir_all(&profile).context("create the browser profile directory")?;
        let mut child = spawn(&chromium, &profile, width, height)?;
        let commands = child.stdin.take().context("browser stdin")?;
        let answers = BufReader::new(child.stdout.take().context("browser stdout")?);
        let mut browser = Self { child, commands, answers, next_id: 0, session: None, profile };
        browser.open_page(width, height).await?;
        Ok(browser)
    }

    /// Sends one command (to the page once one is open) and returns its result.
    pub async fn call(&mut self, method: &str, params: Value) -> anyhow::Result<Value> {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message)?;
        bytes.push(0);
        self.commands.write_all(&bytes).await.with_context(|| format!("send {method}"))?;
        self.commands.flush().await?;
        tokio::time::timeout(CALL_TIMEOUT, self.answer(id))
            .await
            .map_err(|_| anyhow!("{method}: no answer within {CALL_TIMEOUT:?}"))?
            .with_context(|| method.to_owned())
    }

    /// Reads messages until the answer to call `id`.
    async fn answer(&mut self, id: u64) -> anyhow::Result<Value> {
        let mut buffer = Vec::new();
        loop {
            buffer.clear();
            let read = self.answers.read_until(0, &mut buffer).await?;
            if read == 0 {
                bail!("the browser closed its pipe");
            }
            buffer.pop_if(|b| *b == 0);
            let message: Value = serde_json::from_slice(&buffer).context("a protocol message that is not JSON")?;
            if message["id"].as_u64() != Some(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                bail!("protocol error: {error}");
            }
            return Ok(message["result"].clone());
        }
    }

    async fn open_page(&mut self, width: u32, height: u32) -> anyhow::Result<()> {
        let target = self.call("Target.createTarget", json!({"url": "about:blank"})).await?;
        let target_id = target["targetId"].as_str().context("no targetId")?.to_owned();
        let attached = self.call("Target.attachToTarget", json!({"targetId": target_id, "flatten": true})).await?;
        self.session = Some(attached["sessionId"].as_str().context("no sessionId")?.to_owned());
        let metrics = json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false});
        self.call("Emulation.setDeviceMetricsOverride", metrics).await?;
        Ok(())
    }

    /// Loads `url` and waits until the document has loaded.
    pub async fn navigate(&mut self, url: &str) -> anyhow::Result<()> {
        let answer = self.call("Page.navigate", json!({"url": url})).await?;
        if let Some(error) = answer["errorText"].as_str() {
            bail!("navigate to {url}: {error}");
        }
        self.wait_for("the page loaded", "document.readyState === 'complete'", Duration::from_secs(20)).await?;
        Ok(())
    }

    /// Reloads the page and waits until it has loaded.
    pub async fn reload(&mut self) -> anyhow::Result<()> {
        // The old document carries a mark the new one lacks, so its own
        // `complete` state is not taken for the new page's.
        self.evaluate("window.__flotillaBeforeReload = true").await?;
        self.call("Page.reload", json!({})).await?;
        let loaded = "!window.__flotillaBeforeReload && document.readyState === 'complete'";
        self.wait_for("the page reloaded", loaded, Duration::from_secs(20)).await?;
        Ok(())
    }

    /// The value of a JavaScript expression (awaited if it is a promise).
    pub async fn evaluate(&mut self, expression: &str) -> anyhow::Result<Value> {
        let params = json!({"expression": expression, "returnByValue": true, "awaitPromise": true});
        let answer = self.call("Runtime.evaluate", params).await?;
        if let Some(exception) = answer.get("exceptionDetails") {
            bail!("{expression}: {}", exception["exception"]["description"].as_str().unwrap_or("exception"));
        }
        Ok(answer["result"]["value"].clone())
    }

    /// Evaluates `expression` until it is truthy and returns its value; on
    /// timeout the error carries the page's visible text.
    pub async fn wait_for(&mut self, what: &str, expression: &str, timeout: Duration) -> anyhow::Result<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            // While a page loads its context may vanish under a call: ask again.
            if let Ok(value) = self.evaluate(expression).await {
                if truthy(&value) {
                    return Ok(value);
                }
            }
            if Instant::now() >= deadline {
                let text = self.evaluate("document.body ? document.body.innerText : ''").await.unwrap_or_default();
                bail!("timed out after {timeout:?} waiting until {what}; the page shows:\n{}", text.as_str().unwrap_or(""));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Clicks the middle of the first element `selector` matches, as a mouse would.
    pub async fn click(&mut self, selector: &str) -> anyhow::Result<()> {
        let script = format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return null; \
             el.scrollIntoView({{block: 'center'}}); const r = el.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2]; }})()",
            serde_json::to_string(selector)?
        );
        let point = self.evaluate(&script).await?;
        let (Some(x), Some(y)) = (point[0].as_f64(), point[1].as_f64()) else {
            bail!("nothing matches {selector} to click");
        };
        self.call("Input.dispatchMouseEvent", json!({"type": "mouseMoved", "x": x, "y": y})).await?;
        for kind in ["mousePressed", "mouseReleased"] {
            let event = json!({"type": kind, "x": x, "y": y, "button": "left", "clickCount": 1});
            self.call("Input.dispatchMouseEvent", event).await?;
        }
        Ok(())
    }

    /// Empties the field `selector` matches, focuses it and types `text`.
    pub async fn type_into(&mut self, selector: &str, text: &str) -> anyhow::Result<()> {
        let script = format!(
            "(() => {{ const el = document.querySelector({}); if (!el) return false; \
             el.value = ''; el.focus(); return document.activeElement === el; }})()",
            serde_json::to_string(selector)?
        );
        if !truthy(&self.evaluate(&script).await?) {
            bail!("cannot focus {selector}");
        }
        self.call("Input.insertText", json!({"text": text})).await?;
        Ok(())
    }

    /// Types `text` into whatever has the focus as a keyboard would, one
    /// key down and up per character (`\n` is Enter): real key events, which
    /// reach a page that reads the keyboard itself (noVNC) as typing does.
    /// Types lowercase letters, digits, space, `-` and Enter.
    pub async fn press_keys(&mut self, text: &str) -> anyhow::Result<()> {
        for c in text.chars() {
            let (key, code, vk, typed) = match c {
                '\n' => ("Enter".to_owned(), "Enter".to_owned(), 13, "\r".to_owned()),
                ' ' => (" ".to_owned(), "Space".to_owned(), 32, " ".to_owned()),
                '-' => ("-".to_owned(), "Minus".to_owned(), 189, "-".to_owned()),
                c if c.is_ascii_digit() => (c.to_string(), format!("Digit{c}"), c as u32, c.to_string()),
                c if c.is_ascii_lowercase() => {
                    (c.to_string(), format!("Key{}", c.to_ascii_uppercase()), c.to_ascii_uppercase() as u32, c.to_string())
                }
                other => bail!("press_keys does not type {other:?}"),
            };
            let down = json!({"type": "keyDown", "key": key, "code": code, "windowsVirtualKeyCode": vk, "text": typed});
            self.call("Input.dispatchKeyEvent", down).await?;
            let up = json!({"type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": vk});
            self.call("Input.dispatchKeyEvent", up).await?;
        }
        Ok(())
    }

    /// A PNG of the viewport.
    pub async fn screenshot_png(&mut self) -> anyhow::Result<Vec<u8>> {
        let answer = self.call("Page.captureScreenshot", json!({"format": "png"})).await?;
        let data = answer["data"].as_str().context("no screenshot data")?;
        BASE64_STANDARD.decode(data).context("screenshot data is not base64")
    }

    /// Closes the browser and waits for it to exit.
    pub async fn close(mut self) {
        self.session = None;
        let _ = self.call("Browser.close", json!({})).await;
        if tokio::time::timeout(Duration::from_secs(5), self.child.wait()).await.is_err() {
            let _ = self.child.start_kill();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        // Give the browser a moment to exit, so it writes no more into the profile.
        let deadline = Instant::now() + Duration::from_secs(2);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = std::fs::remove_dir_all(&self.profile);
    }
}

/// JavaScript truthiness of a value returned by value.
fn truthy(value: &Value) -> bool {
    match value {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// Runs the browser headless and offline-friendly, its protocol pipe on the
/// child's stdin and stdout.
fn spawn(chromium: &Path, profile: &Path, width: u32, height: u32) -> anyhow::Result<Child> {
    let log = if std::env::var_os("FLOTILLA_TEST_LOG").is_some() { Stdio::inherit() } else { Stdio::null() };
    Command::new("sh")
        .arg("-c")
        .arg(r#"exec "$@" 3<&0 4>&1 0</dev/null 1>&2"#)
        .arg("sh")
        .arg(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-extensions",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--mute-audio",
            "--remote-debugging-pipe",
        ])
        .arg(format!("--window-size={width},{height}"))
        .arg(format!("--user-data-dir={}", profile.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("start {}", chromium.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truthiness_follows_javascript() {
        for value in [json!(true), json!(1), json!("x"), json!([]), json!({})] {
            assert!(truthy(&value), "{value}");
        }
        for value in [json!(null), json!(false), json!(0), json!("")] {
            assert!(!truthy(&value), "{value}");
        }
    }
}
