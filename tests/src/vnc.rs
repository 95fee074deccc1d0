//! Live views from the outside: a minimal RFB viewer over the API's view
//! WebSocket (handshake, key events, nothing drawn), a viewer that sends
//! whatever bytes it is given (as a hostile client would), and the VNC
//! server processes of a task and their listening sockets as `/proc`
//! shows them.

use std::time::Duration;

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

/// The variable the worker marks a task's VNC server with.
pub const TASK_VAR: &str = "FLOTILLA_LIVE_VIEW_TASK";
/// How long one handshake step may take.
const STEP: Duration = Duration::from_secs(15);

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One RFB viewer past the handshake.
pub struct RfbViewer {
    socket: Socket,
    pending: Vec<u8>,
    /// The desktop's size as the server announced it.
    pub size: (u16, u16),
}

/// A view URL's parts: the API's address, the task and the token, which
/// only the fragment holds (the page's own URL names no token).
pub struct ViewLinkParts {
    /// `http://host[:port]`.
    pub base: String,
    pub task: String,
    pub token: String,
}

/// Splits a view URL (`http://host/view?…#task=…&token=…`).
pub fn view_link_parts(view_url: &str) -> anyhow::Result<ViewLinkParts> {
    let rest = view_url.strip_prefix("http://").context("an http view URL")?;
    let host = rest.split('/').next().context("a host")?;
    let (page, fragment) = rest.split_once('#').context("a fragment")?;
    anyhow::ensure!(!page.contains("token"), "the page's own URL names no token: {page}");
    let param = |name: &str| {
        fragment
            .split('&')
            .find_map(|p| p.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
            .context("a fragment parameter")
    };
    Ok(ViewLinkParts { base: format!("http://{host}"), task: param("task")?, token: param("token")? })
}

/// What the view page does: trades `token` for a one-time ticket of
/// `task`'s view (the token in a header) and names the socket URL that
/// carries the ticket; `Err` with the API's status when it refuses.
pub async fn ticketed_socket(base: &str, task: &str, token: &str) -> Result<String, u16> {
    let answer = reqwest::Client::new()
        .post(format!("{base}/v1/tasks/{task}/view/ticket"))
        .header("x-flotilla-view-token", token)
        .send()
        .await
        .map_err(|_| 0u16)?;
    if !answer.status().is_success() {
        return Err(answer.status().as_u16());
    }
    let body: serde_json::Value = answer.json().await.map_err(|_| 0u16)?;
    let ticket = body["ticket"].as_str().ok_or(0u16)?;
    let host = base.strip_prefix("http://").unwrap_or(base);
    Ok(format!("ws://{host}/v1/tasks/{task}/view/socket?ticket={ticket}"))
}

/// The WebSocket URL a view URL's page opens, with a fresh one-time ticket:
/// one call per connection.
pub async fn socket_url(view_url: &str) -> anyhow::Result<String> {
    let link = view_link_parts(view_url)?;
    ticketed_socket(&link.base, &link.task, &link.token)
        .await
        .map_err(|status| anyhow::anyhow!("the ticket was refused: {status}"))
}

/// The status the API refuses a ticket for `view_url`'s token with.
pub async fn ticket_refused(view_url: &str) -> anyhow::Result<u16> {
    let link = view_link_parts(view_url)?;
    match ticketed_socket(&link.base, &link.task, &link.token).await {
        Ok(_) => bail!("a ticket was handed out for {view_url}"),
        Err(status) => Ok(status),
    }
}

impl RfbViewer {
    /// Opens `url` (a view socket) and completes the RFB handshake as a
    /// shared viewer without a password.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("binary"));
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        let mut viewer = Self { socket, pending: Vec::new(), size: (0, 0) };
        let version = viewer.read(12).await?;
        if !version.starts_with(b"RFB 003.") {
            bail!("not an RFB server: {version:?}");
        }
        viewer.send(b"RFB 003.008\n").await?;
        let count = viewer.read(1).await?[0];
        let types = viewer.read(usize::from(count)).await?;
        if !types.contains(&1) {
            bail!("the server wants a password: {types:?}");
        }
        viewer.send(&[1]).await?;
        let result = viewer.read(4).await?;
        if result != [0, 0, 0, 0] {
            bail!("security handshake refused");
        }
        viewer.send(&[1]).await?;
        let init = viewer.read(24).await?;
        viewer.size = (u16::from_be_bytes([init[0], init[1]]), u16::from_be_bytes([init[2], init[3]]));
        let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
        viewer.read(name_len).await?;
        Ok(viewer)
    }

    /// Presses and releases each keysym in turn.
    pub async fn type_keysyms(&mut self, keysyms: &[u32]) -> anyhow::Result<()> {
        for keysym in keysyms {
            for down in [1u8, 0] {
                let mut message = vec![4, down, 0, 0];
                message.extend(keysym.to_be_bytes());
                self.send(&message).await?;
            }
        }
        Ok(())
    }

    /// Whether the server closes the connection within a handshake step.
    pub async fn closed_by_server(self) -> bool {
        closed_by_server(self.socket).await
    }

    /// Closes the connection.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }

    async fn send(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        self.socket.send(Message::Binary(bytes.to_vec().into())).await?;
        Ok(())
    }

    async fn read(&mut self, n: usize) -> anyhow::Result<Vec<u8>> {
        while self.pending.len() < n {
            let message = tokio::time::timeout(STEP, self.socket.next()).await.context("the server went quiet")?;
            match message {
                Some(Ok(Message::Binary(data))) => self.pending.extend_from_slice(&data),
                Some(Ok(Message::Close(_))) | None => bail!("the server closed the view"),
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
            }
        }
        Ok(self.pending.drain(..n).collect())
    }
}

/// A viewer that answers the server's version with bytes of the test's
/// choosing and reads whatever comes back.
pub struct RawViewer {
    socket: Socket,
}

impl RawViewer {
    /// Opens `url` (a view socket), waits for the server's version and
    /// sends `bytes` in one message.
    pub async fn send(url: &str, bytes: &[u8]) -> anyhow::Result<Self> {
        let mut request = url.into_client_request()?;
        request.headers_mut().insert("sec-websocket-protocol", HeaderValue::from_static("binary"));
        let (socket, _) = tokio_tungstenite::connect_async(request).await?;
        let mut viewer = RfbViewer { socket, pending: Vec::new(), size: (0, 0) };
        let version = viewer.read(12).await?;
        if !version.starts_with(b"RFB 003.") {
            bail!("not an RFB server: {version:?}");
        }
        viewer.send(bytes).await?;
        Ok(Self { socket: viewer.socket })
    }

    /// Whether the server closes the connection within a handshake step.
    pub async fn closed_by_server(self) -> bool {
        closed_by_server(self.socket).await
    }
}

/// Whether the server closes `socket` within a handshake step; what it
/// sends meanwhile is read and let go.
async fn closed_by_server(mut socket: Socket) -> bool {
    let until_closed = async {
        loop {
            match socket.next().await {
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    };
    tokio::time::timeout(STEP, until_closed).await.is_ok()
}

/// Key presses and releases hidden from a view-only filter that reads the
/// viewer's stream one byte ahead of the server. Each key event is, to the
/// server, `SetEncodings` (raw and an unknown encoding) and a `KeyEvent`;
/// to the filter, two `FramebufferUpdateRequest`s, after which it is one
/// byte ahead again. The last message brings both into step (to the server
/// `SetEncodings`, to the filter a `Fence` one byte shorter), so the server
/// is left with no half message to wait on.
pub fn keys_behind_a_desync(keysyms: &[u32]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for keysym in keysyms {
        for down in [1u8, 0] {
            bytes.extend([2, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 4, down, 0, 0]);
            bytes.extend(keysym.to_be_bytes());
        }
    }
    bytes.extend([2, 248, 0, 2, 0, 0, 0, 0, 0, 2, 0, 0]);
    bytes
}

/// The keysyms of ASCII text (Return for a newline).
pub fn keysyms(text: &str) -> Vec<u32> {
    text.chars().map(|c| if c == '\n' { 0xff0d } else { c as u32 }).collect()
}

/// The pids of live processes marked as `task`'s VNC server.
pub fn vnc_processes(task: &str) -> Vec<u32> {
    marked_processes(TASK_VAR, task)
}

/// The pids of live processes whose environment sets `var` to `value`.
pub fn marked_processes(var: &str, value: &str) -> Vec<u32> {
    let needle = format!("{var}={value}");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let alive = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| s.rsplit_once(')').map(|(_, rest)| !rest.trim_start().starts_with('Z')))
                .unwrap_or(false);
            alive
                && std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.split(|b| *b == 0).any(|var| var == needle.as_bytes()))
                    .unwrap_or(false)
        })
        .collect()
}

/// What a process listens on: TCP ports (IPv4 and IPv6) and Unix socket paths.
#[derive(Debug, Default)]
pub struct Listening {
    pub tcp_ports: Vec<u16>,
    pub unix_paths: Vec<std::path::PathBuf>,
}

/// The sockets process `pid` listens on, from its descriptors and the
/// kernel's socket tables.
pub fn listening(pid: u32) -> Listening {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(|fd| {
                let target = std::fs::read_link(fd.ok()?.path()).ok()?;
                let inode = target.to_str()?.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned();
                Some(inode)
            })
            .collect()
        })
        .unwrap_or_default();
    let mut found = Listening::default();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for fields in text.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
            // `st` 0A is LISTEN; the port is the local address's hex suffix.
            if fields.len() > 9 && fields[3] == "0A" && inodes.iter().any(|i| i == fields[9]) {
                let port = fields[1].rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
                found.tcp_ports.extend(port);
            }
        }
    }
    let text = std::fs::read_to_string(format!("/proc/{pid}/net/unix")).unwrap_or_default();
    for fields in text.lines().skip(1).map(|l| l.split_whitespace().collect::<Vec<_>>()) {
        // Flags 00010000: accepting connections.
        if fields.len() > 7 && fields[3] == "00010000" && inodes.iter().any(|i| i == fields[6]) {
            found.unix_paths.push(std::path::PathBuf::from(fields[7]));
        }
    }
    found
}
