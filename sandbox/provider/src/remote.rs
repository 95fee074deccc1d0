//! A desktop whose VNC server runs elsewhere and is reached over a
//! WebSocket (websockify), as an E2B sandbox's stream is: the worker opens
//! the socket, answers the server's VNC authentication (RFC 6143 §7.2.2)
//! with the desktop's key, and from then on carries RFB like a local VNC
//! server's. Towards its own viewers the worker plays the server's part of
//! the handshake with no authentication, so the key never leaves the
//! worker and a viewer's bytes pass through the same view-only filter as
//! for a local desktop.

use bytes::Bytes;
use des::cipher::{BlockEncrypt, KeyInit};
use des::Des;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use reqwest::header::{self, HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The RFB version both ends are spoken to in.
pub const RFB_VERSION: &[u8; 12] = b"RFB 003.008\n";
/// RFB security type: none.
const SECURITY_NONE: u8 = 1;
/// RFB security type: VNC authentication.
const SECURITY_VNC: u8 = 2;

/// A desktop's own stream, started for its first viewer and stopped after
/// its last (or when the desktop is taken off show).
pub trait RemoteStream: Send + Sync + 'static {
    /// Starts the stream; where it is and its key.
    fn start(&self) -> BoxFuture<'_, Result<RemoteDesktop, String>>;
    /// Stops the stream; a failure is the implementation's to log.
    fn stop(&self) -> BoxFuture<'_, ()>;
}

/// Where a remote desktop's VNC WebSocket is, and its key.
#[derive(Clone)]
pub struct RemoteDesktop {
    /// `http(s)://…/websockify`.
    pub url: String,
    /// Headers that route the request (an edge's routing headers).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The VNC password; never printed.
    pub password: String,
    /// The client that reaches the stream (the provider's own, which
    /// trusts what the provider trusts).
    pub client: reqwest::Client,
}

impl std::fmt::Debug for RemoteDesktop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteDesktop").field("url", &self.url).field("password", &"***").finish()
    }
}

/// Why a remote desktop could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("cannot open the desktop's stream: {0}")]
    Connect(String),
    #[error("the desktop's VNC server refused the handshake: {0}")]
    Handshake(String),
    #[error("the desktop's stream closed")]
    Closed,
}

/// The WebSocket upgraded from a reqwest response.
pub type RemoteSocket = WebSocketStream<reqwest::Upgraded>;

/// An authenticated RFB connection to a remote desktop, positioned where
/// the viewer's `ClientInit` goes next.
pub struct RemoteRfb {
    socket: RemoteSocket,
    /// Bytes the server sent past what the handshake read.
    pending: Vec<u8>,
}

impl RemoteRfb {
    /// Opens the desktop's WebSocket and authenticates.
    pub async fn open(desktop: &RemoteDesktop) -> Result<Self, RemoteError> {
        let socket = upgrade(desktop).await?;
        let mut rfb = Self { socket, pending: Vec::new() };
        rfb.authenticate(&desktop.password).await?;
        Ok(rfb)
    }

    async fn authenticate(&mut self, password: &str) -> Result<(), RemoteError> {
        let version = self.read_exact(12).await?;
        if !version.starts_with(b"RFB 003.") {
            return Err(RemoteError::Handshake(format!("not an RFB server: {:?}", String::from_utf8_lossy(&version))));
        }
        self.send(RFB_VERSION).await?;
        let count = self.read_exact(1).await?[0];
        if count == 0 {
            let length = u32::from_be_bytes(self.read_array().await?) as usize;
            let reason = self.read_exact(length.min(4096)).await?;
            return Err(RemoteError::Handshake(String::from_utf8_lossy(&reason).into_owned()));
        }
        let offered = self.read_exact(count as usize).await?;
        if offered.contains(&SECURITY_VNC) {
            self.send(&[SECURITY_VNC]).await?;
            let challenge: [u8; 16] = self.read_array().await?;
            self.send(&vnc_response(password, &challenge)).await?;
        } else if offered.contains(&SECURITY_NONE) {
            self.send(&[SECURITY_NONE]).await?;
        } else {
            return Err(RemoteError::Handshake(format!("no security type this worker speaks in {offered:?}")));
        }
        match u32::from_be_bytes(self.read_array().await?) {
            0 => Ok(()),
            _ => Err(RemoteError::Handshake("the desktop's key was refused".into())),
        }
    }

    /// Sends RFB bytes to the server.
    pub async fn send(&mut self, bytes: &[u8]) -> Result<(), RemoteError> {
        self.socket.send(Message::Binary(Bytes::copy_from_slice(bytes))).await.map_err(|_| RemoteError::Closed)
    }

    /// The next RFB bytes from the server; `None` once it closed.
    pub async fn recv(&mut self) -> Option<Bytes> {
        if !self.pending.is_empty() {
            return Some(Bytes::from(std::mem::take(&mut self.pending)));
        }
        self.next_message().await
    }

    async fn next_message(&mut self) -> Option<Bytes> {
        loop {
            match self.socket.next().await? {
                Ok(Message::Binary(data)) => return Some(data),
                Ok(Message::Text(text)) => return Some(Bytes::from(text.as_str().to_owned())),
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
                Ok(Message::Close(_)) | Err(_) => return None,
            }
        }
    }

    /// Reads exactly `n` bytes of the server's stream.
    pub async fn read_exact(&mut self, n: usize) -> Result<Vec<u8>, RemoteError> {
        while self.pending.len() < n {
            let more = self.next_message().await.ok_or(RemoteError::Closed)?;
            self.pending.extend_from_slice(&more);
        }
        let rest = self.pending.split_off(n);
        Ok(std::mem::replace(&mut self.pending, rest))
    }

    async fn read_array<const N: usize>(&mut self) -> Result<[u8; N], RemoteError> {
        let bytes = self.read_exact(N).await?;
        bytes.try_into().map_err(|_| RemoteError::Closed)
    }

    /// Closes the connection.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// Opens the WebSocket with an HTTP/1.1 upgrade.
async fn upgrade(desktop: &RemoteDesktop) -> Result<RemoteSocket, RemoteError> {
    let mut request = desktop
        .client
        .get(&desktop.url)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_VERSION, "13")
        .header(header::SEC_WEBSOCKET_KEY, tokio_tungstenite::tungstenite::handshake::client::generate_key())
        .header(header::SEC_WEBSOCKET_PROTOCOL, "binary");
    for (name, value) in &desktop.headers {
        request = request.header(name, value);
    }
    let response = request.send().await.map_err(|e| RemoteError::Connect(e.without_url().to_string()))?;
    if response.status() != reqwest::StatusCode::SWITCHING_PROTOCOLS {
        return Err(RemoteError::Connect(format!("status {}", response.status().as_u16())));
    }
    let upgraded = response.upgrade().await.map_err(|e| RemoteError::Connect(e.to_string()))?;
    Ok(WebSocketStream::from_raw_socket(upgraded, Role::Client, None).await)
}

/// The answer to a VNC challenge: each 8-byte half DES-encrypted with the
/// password's first 8 bytes (zero-padded), each byte's bits reversed.
pub fn vnc_response(password: &str, challenge: &[u8; 16]) -> [u8; 16] {
    let mut key = [0u8; 8];
    for (slot, byte) in key.iter_mut().zip(password.bytes()) {
        *slot = byte.reverse_bits();
    }
    let cipher = Des::new(&key.into());
    let mut out = *challenge;
    for half in out.chunks_exact_mut(8) {
        cipher.encrypt_block(half.into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vnc_response_is_des_with_bit_reversed_key_bytes() {
        let challenge = [0u8; 16];
        // DES of a zero block under the zero key (an empty password).
        assert_eq!(vnc_response("", &challenge)[..8], [0x8c, 0xa6, 0x4d, 0xe9, 0xc1, 0xb1, 0x23, 0xa7]);
        // The same key twice gives the same halves; another key another answer.
        let a = vnc_response("secret", &challenge);
        assert_eq!(a[..8], a[8..]);
        assert_ne!(a, vnc_response("secreu", &challenge));
        // Only the first eight bytes count.
        assert_eq!(vnc_response("abcdefgh", &challenge), vnc_response("abcdefghXYZ", &challenge));
    }
}
