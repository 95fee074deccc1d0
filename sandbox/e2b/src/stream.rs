//! A sandbox's live stream as the E2B Desktop SDK runs it (`stream.start()`
//! / `getUrl()` / `stop()`): x11vnc on the sandbox's display at port 5900
//! behind a password (the SDK's `requireAuth`), and noVNC's `novnc_proxy`
//! (websockify) serving the page and a WebSocket bridge on port 6080, which
//! the E2B edge exposes as `6080-<sandboxId>.<domain>`.
//!
//! Departures from the SDK's commands, none of which changes what the stock
//! template serves: the display is `$DISPLAY` (the SDK's `:0`, which the
//! sandbox is given at create); noVNC is looked for in `/opt/noVNC` (the
//! stock template) then `/usr/share/novnc` (Debian's package), so a
//! self-hosted template built on Debian streams too; x11vnc runs with
//! `-noshm`, so it works when the display server is outside the sandbox's
//! IPC namespace; x11vnc is an envd background process of its own, like
//! noVNC, instead of forking with `-bg`, so stopping kills both through
//! envd by pid; a running stream is recognised by its port, not `pgrep`.
//!
//! The key (the SDK's `authKey`) opens the desktop for input as well as
//! watching, so it stays with the worker: it never goes into a log line, an
//! event, or a URL that Flotilla hands out.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use rand::distr::{Alphanumeric, SampleString};
use reqwest::header::{HeaderName, HeaderValue};

use super::envd::{Envd, EnvdError, EnvdTarget, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};
use super::{lock, E2bProvider, EnvdAddress, Known};
use flotilla_sandbox::remote::{RemoteDesktop, RemoteStream};
use flotilla_sandbox::{SandboxError, SandboxId};

/// The in-sandbox port noVNC listens on, as in the Desktop SDK.
pub const STREAM_PORT: u16 = 6080;
/// The in-sandbox port of x11vnc, as in the Desktop SDK.
pub const VNC_PORT: u16 = 5900;
/// The length of a stream key, as the SDK generates it.
const KEY_LEN: usize = 16;
/// How long starting or stopping the stream may take (the SDK waits 10 s
/// for noVNC to listen).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The path of noVNC's WebSocket bridge.
pub const SOCKET_PATH: &str = "/websockify";

/// Where a client opens a sandbox stream's WebSocket: the URL and the
/// routing headers it needs.
#[derive(Debug, Clone)]
pub struct StreamSocket {
    /// `http(s)://…/websockify`, opened with an HTTP/1.1 upgrade.
    pub url: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// Why a stream could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StreamError {
    #[error("Stream is already running")]
    Running,
    #[error("the stream failed (exit {code}): {message}")]
    Failed { code: i32, message: String },
    #[error("the stream command did not finish within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Envd(EnvdError),
}

/// Starts the stream in the sandbox `target` names, as the Desktop SDK's
/// `stream.start({requireAuth: true})` does.
async fn start_on(envd: &Envd, target: &EnvdTarget) -> Result<SandboxStream, StreamError> {
    let key = StreamKey::generate();
    command_on(envd, target, &prepare_command(&key)).await?;
    let mut stream = SandboxStream { key, pids: Vec::new() };
    for command in [vnc_command(), novnc_command()] {
        match envd.spawn(target, &command).await {
            Ok(pid) => stream.pids.push(pid),
            Err(error) => {
                stop_on(envd, target, stream).await.ok();
                return Err(StreamError::Envd(error));
            }
        }
    }
    if let Err(error) = command_on(envd, target, &wait_command()).await {
        stop_on(envd, target, stream).await.ok();
        return Err(error);
    }
    Ok(stream)
}

/// Stops a stream: its processes are killed through envd (as the SDK kills
/// its noVNC handle) and x11vnc with `pkill`.
async fn stop_on(envd: &Envd, target: &EnvdTarget, stream: SandboxStream) -> Result<(), StreamError> {
    for pid in stream.pids {
        envd.kill(target, pid).await;
    }
    command_on(envd, target, &stop_command()).await
}

async fn command_on(envd: &Envd, target: &EnvdTarget, command: &str) -> Result<(), StreamError> {
    let output = envd.run(target, command, COMMAND_TIMEOUT).await.map_err(|e| match e {
        EnvdError::Timeout => StreamError::Timeout(COMMAND_TIMEOUT),
        other => StreamError::Envd(other),
    })?;
    match output.exit_code {
        0 => Ok(()),
        3 => Err(StreamError::Running),
        code => {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let tail: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
            Err(StreamError::Failed { code, message: tail.join(" | ") })
        }
    }
}

/// One sandbox's stream as a live view's source: started for the first
/// viewer, stopped after the last.
pub struct E2bLiveStream {
    envd: Envd,
    target: EnvdTarget,
    socket: StreamSocket,
    client: reqwest::Client,
    running: tokio::sync::Mutex<Option<SandboxStream>>,
}

impl RemoteStream for E2bLiveStream {
    fn start(&self) -> BoxFuture<'_, Result<RemoteDesktop, String>> {
        async move {
            let mut running = self.running.lock().await;
            if let Some(old) = running.take() {
                stop_on(&self.envd, &self.target, old).await.ok();
            }
            let stream = start_on(&self.envd, &self.target).await.map_err(|e| e.to_string())?;
            let desktop = RemoteDesktop {
                url: self.socket.url.clone(),
                headers: self.socket.headers.clone(),
                password: stream.key.expose().to_owned(),
                client: self.client.clone(),
            };
            *running = Some(stream);
            Ok(desktop)
        }
        .boxed()
    }

    fn stop(&self) -> BoxFuture<'_, ()> {
        async move {
            let Some(stream) = self.running.lock().await.take() else { return };
            if let Err(error) = stop_on(&self.envd, &self.target, stream).await {
                tracing::warn!(%error, "cannot stop an e2b sandbox's stream");
            }
        }
        .boxed()
    }
}

impl E2bProvider {
    /// Starts sandbox `id`'s stream as the Desktop SDK's
    /// `stream.start({requireAuth: true})` does. A stream that runs already
    /// is an error, as in the SDK: stop it first.
    pub async fn start_stream(&self, id: &SandboxId) -> Result<SandboxStream, SandboxError> {
        let known = self.session(id).await?;
        start_on(&self.envd, &known.target).await.map_err(|e| self.stream_failure(id, &known, e))
    }

    /// Stops sandbox `id`'s stream.
    pub async fn stop_stream(&self, id: &SandboxId, stream: SandboxStream) -> Result<(), SandboxError> {
        let known = self.session(id).await?;
        stop_on(&self.envd, &known.target, stream).await.map_err(|e| self.stream_failure(id, &known, e))
    }

    fn stream_failure(&self, id: &SandboxId, known: &Known, error: StreamError) -> SandboxError {
        match error {
            StreamError::Envd(error) => self.envd_failure(id, Some(known), error),
            other => SandboxError::Display(other.to_string()),
        }
    }

    /// Sandbox `id`'s stream as a live view's source, when the provider knows the sandbox.
    pub fn live_source(&self, id: &SandboxId) -> Option<Arc<dyn RemoteStream>> {
        let target = lock(&self.known).get(id)?.target.clone();
        let socket = self.stream_socket(id);
        let client = self.stream_client.clone();
        Some(Arc::new(E2bLiveStream { envd: self.envd.clone(), target, socket, client, running: Default::default() }))
    }

    /// The origin of the sandboxes' per-port hosts.
    pub fn stream_origin(&self) -> StreamOrigin {
        let domain = self.config.domain.clone();
        match &self.config.envd {
            EnvdAddress::SandboxHost => StreamOrigin { scheme: "https".into(), domain, port: None },
            EnvdAddress::Routed { base_url } => {
                let parsed = reqwest::Url::parse(base_url).ok();
                let scheme = parsed.as_ref().map_or("https", |u| u.scheme()).to_owned();
                StreamOrigin { scheme, domain, port: parsed.and_then(|u| u.port()) }
            }
        }
    }

    /// The Desktop SDK's `stream.getUrl({viewOnly, authKey})` of sandbox `id`.
    pub fn stream_page_url(&self, id: &SandboxId, view_only: bool, key: &StreamKey) -> String {
        page_url(&self.stream_origin(), id.as_str(), view_only, key)
    }

    /// Where the worker opens sandbox `id`'s stream WebSocket: through
    /// `E2B_SANDBOX_URL` with the routing headers, else the sandbox's own
    /// `6080-<id>.<domain>` host.
    pub fn stream_socket(&self, id: &SandboxId) -> StreamSocket {
        match &self.config.envd {
            EnvdAddress::SandboxHost => {
                StreamSocket { url: format!("{}{SOCKET_PATH}", self.stream_origin().host_url(id.as_str())), headers: Vec::new() }
            }
            EnvdAddress::Routed { base_url } => {
                let headers = [(SANDBOX_ID_HEADER, id.as_str().to_owned()), (SANDBOX_PORT_HEADER, STREAM_PORT.to_string())]
                    .into_iter()
                    .filter_map(|(name, value)| Some((HeaderName::from_static(name), HeaderValue::from_str(&value).ok()?)))
                    .collect();
                StreamSocket { url: format!("{base_url}{SOCKET_PATH}"), headers }
            }
        }
    }
}

/// A running stream: its key and the envd processes that serve it.
#[derive(Debug)]
pub struct SandboxStream {
    pub key: StreamKey,
    pids: Vec<u32>,
}

/// The password of one sandbox's stream; `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct StreamKey(String);

impl StreamKey {
    /// A new random key: 16 letters and digits, as the SDK makes them.
    pub fn generate() -> Self {
        Self(Alphanumeric.sample_string(&mut rand::rng(), KEY_LEN))
    }

    /// The key itself, for the VNC handshake and the SDK's page URL.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamKey(***)")
    }
}

/// Refuses a second stream ("Stream is already running", exit 3; the SDK
/// asks `pgrep`, this asks the port, which every process of the sandbox
/// sees) and stores `key` as x11vnc's password.
pub fn prepare_command(key: &StreamKey) -> String {
    format!(
        "netstat -tuln | grep -q ':{VNC_PORT} ' && {{ echo 'Stream is already running' >&2; exit 3; }}\n\
         mkdir -p ~/.vnc && x11vnc -storepasswd '{key}' ~/.vnc/passwd >/dev/null 2>&1 \
         || {{ echo 'cannot store the stream key' >&2; exit 2; }}\n",
        key = key.expose()
    )
}

/// x11vnc on the sandbox's display behind the stored password, as a
/// background process of its own (the SDK forks it with `-bg`).
pub fn vnc_command() -> String {
    format!(
        "exec x11vnc -display \"${{DISPLAY:-:0}}\" -forever -wait 50 -shared -rfbport {VNC_PORT} -usepw -noshm \
         2>/tmp/x11vnc_stderr.log >/dev/null"
    )
}

/// noVNC's proxy on [`STREAM_PORT`], as the SDK runs it.
pub fn novnc_command() -> String {
    format!(
        "cd /opt/noVNC/utils 2>/dev/null || cd /usr/share/novnc/utils || exit 2\n\
         exec ./novnc_proxy --vnc localhost:{VNC_PORT} --listen {STREAM_PORT} --web \"$(dirname \"$PWD\")\" >/tmp/novnc.log 2>&1"
    )
}

/// Waits (as the SDK does, polling `netstat` for up to 10 s) until x11vnc
/// and noVNC both listen.
pub fn wait_command() -> String {
    format!(
        "for _ in $(seq 100); do\n\
           netstat -tuln | grep -q ':{VNC_PORT} ' && netstat -tuln | grep -q ':{STREAM_PORT} ' && exit 0; sleep 0.1\n\
         done\n\
         tail -n 3 /tmp/x11vnc_stderr.log /tmp/novnc.log >&2\n\
         exit 1\n"
    )
}

/// The SDK's `pkill x11vnc`, then waits until neither port listens.
pub fn stop_command() -> String {
    format!(
        "pkill -x x11vnc\n\
         for _ in $(seq 50); do\n\
           netstat -tuln | grep -q ':{VNC_PORT} \\|:{STREAM_PORT} ' || exit 0; sleep 0.1\n\
         done\n\
         echo 'the stream still listens' >&2\n\
         exit 1\n"
    )
}

/// The page URL of the Desktop SDK's `getUrl()`:
/// `<scheme>://6080-<id>.<domain>[:port]/vnc.html?autoconnect=true[&view_only=true]&resize=scale&password=<key>`.
pub fn page_url(origin: &StreamOrigin, id: &str, view_only: bool, key: &StreamKey) -> String {
    let view_only = if view_only { "&view_only=true" } else { "" };
    format!("{}/vnc.html?autoconnect=true{view_only}&resize=scale&password={}", origin.host_url(id), key.expose())
}

/// How the sandbox's per-port hosts are reached: `https://<port>-<id>.<domain>`
/// on the hosted service; with the scheme and port of `E2B_SANDBOX_URL`
/// when that points at a self-hosted or local edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamOrigin {
    pub scheme: String,
    pub domain: String,
    pub port: Option<u16>,
}

impl StreamOrigin {
    /// `<scheme>://6080-<id>.<domain>[:port]`.
    pub fn host_url(&self, id: &str) -> String {
        let port = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{STREAM_PORT}-{id}.{}{port}", self.scheme, self.domain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sixteen_letters_or_digits_and_never_print() {
        let key = StreamKey::generate();
        assert_eq!(key.expose().len(), 16);
        assert!(key.expose().chars().all(|c| c.is_ascii_alphanumeric()));
        assert_ne!(key, StreamKey::generate());
        assert!(!format!("{key:?}").contains(key.expose()));
    }

    #[test]
    fn the_page_url_has_the_desktop_sdk_form() {
        let key = StreamKey("abcdEFGH12345678".into());
        let hosted = StreamOrigin { scheme: "https".into(), domain: "e2b.app".into(), port: None };
        assert_eq!(
            page_url(&hosted, "i1x", true, &key),
            "https://6080-i1x.e2b.app/vnc.html?autoconnect=true&view_only=true&resize=scale&password=abcdEFGH12345678"
        );
        let local = StreamOrigin { scheme: "http".into(), domain: "localhost".into(), port: Some(4000) };
        assert_eq!(
            page_url(&local, "i1x", false, &key),
            "http://6080-i1x.localhost:4000/vnc.html?autoconnect=true&resize=scale&password=abcdEFGH12345678"
        );
    }

    #[test]
    fn the_commands_are_the_sdks() {
        assert!(prepare_command(&StreamKey("k".into())).contains("x11vnc -storepasswd 'k' ~/.vnc/passwd"));
        let vnc = vnc_command();
        assert!(
            vnc.contains("x11vnc -display \"${DISPLAY:-:0}\" -forever -wait 50 -shared -rfbport 5900 -usepw -noshm"),
            "{vnc}"
        );
        assert!(novnc_command().contains("novnc_proxy --vnc localhost:5900 --listen 6080"));
        assert!(stop_command().starts_with("pkill -x x11vnc"));
    }
}
