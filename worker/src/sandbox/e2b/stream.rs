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

use std::time::Duration;

use rand::distr::{Alphanumeric, SampleString};
use reqwest::header::{HeaderName, HeaderValue};

use super::envd::{EnvdError, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};
use super::{E2bProvider, EnvdAddress, Known};
use crate::sandbox::{SandboxError, SandboxId};

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

impl E2bProvider {
    /// Starts sandbox `id`'s stream as the Desktop SDK's
    /// `stream.start({requireAuth: true})` does. A stream that runs already
    /// is an error, as in the SDK: stop it first.
    pub async fn start_stream(&self, id: &SandboxId) -> Result<SandboxStream, SandboxError> {
        let key = StreamKey::generate();
        let known = self.session(id).await?;
        self.stream_command(id, &known, &prepare_command(&key)).await?;
        let mut stream = SandboxStream { key, pids: Vec::new() };
        for command in [vnc_command(), novnc_command()] {
            match self.envd.spawn(&known.target, &command).await {
                Ok(pid) => stream.pids.push(pid),
                Err(error) => {
                    self.stop_stream(id, stream).await.ok();
                    return Err(self.envd_failure(id, Some(&known), error));
                }
            }
        }
        if let Err(error) = self.stream_command(id, &known, &wait_command()).await {
            self.stop_stream(id, stream).await.ok();
            return Err(error);
        }
        Ok(stream)
    }

    /// Stops sandbox `id`'s stream: its processes are killed through envd
    /// (as the SDK kills its noVNC handle) and x11vnc with `pkill`.
    pub async fn stop_stream(&self, id: &SandboxId, stream: SandboxStream) -> Result<(), SandboxError> {
        let known = self.session(id).await?;
        for pid in stream.pids {
            self.envd.kill(&known.target, pid).await;
        }
        self.stream_command(id, &known, &stop_command()).await
    }

    async fn stream_command(&self, id: &SandboxId, known: &Known, command: &str) -> Result<(), SandboxError> {
        let output = self.envd.run(&known.target, command, COMMAND_TIMEOUT).await.map_err(|e| match e {
            EnvdError::Timeout => SandboxError::Display(format!("the stream command did not finish within {COMMAND_TIMEOUT:?}")),
            other => self.envd_failure(id, Some(known), other),
        })?;
        match output.exit_code {
            0 => Ok(()),
            3 => Err(SandboxError::Display("Stream is already running".into())),
            code => {
                let stderr = String::from_utf8_lossy(&output.stderr);
                let tail: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
                Err(SandboxError::Display(format!("the stream failed (exit {code}): {}", tail.join(" | "))))
            }
        }
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
