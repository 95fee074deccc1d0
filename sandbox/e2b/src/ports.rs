//! A byte stream to a port inside a sandbox through the host's edge, as
//! E2B routes any port a sandbox listens on: a connection to the routing
//! address whose first request carries `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port`. The program on the stream (a DevTools client) writes
//! its own request for the sandbox's loopback; the two routing headers are
//! put in after its request line, and every later byte passes as it is, so
//! the edge sends the whole connection to that port. An `https` edge (a
//! sandbox host beyond loopback) is reached over TLS, its certificate
//! verified against the system's roots and the provider's extra ones.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use flotilla_sandbox::{PortStream, SandboxError, SandboxId};
use reqwest::Url;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;

use super::envd::{SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};

/// The longest request line taken before the routing headers go in.
const MAX_REQUEST_LINE: usize = 8 * 1024;

/// Whether ports are reached through the routing address `base`: an
/// `http` or `https` one (a sandbox host); a host per sandbox is not carried.
pub(crate) fn carried(base: Option<&str>) -> bool {
    edge(base).is_some()
}

/// The edge's scheme, host and port.
fn edge(base: Option<&str>) -> Option<(bool, String, u16)> {
    let url = Url::parse(base?).ok()?;
    let tls = match url.scheme() {
        "http" => false,
        "https" => true,
        _ => return None,
    };
    Some((tls, url.host_str()?.to_owned(), url.port_or_known_default()?))
}

/// TLS towards an edge: the system's roots and `extra_roots` (PEM).
pub(crate) fn connector(extra_roots: Option<&[u8]>) -> Result<TlsConnector, SandboxError> {
    let mut roots = rustls::RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    let mut extra = 0;
    if let Some(pem) = extra_roots {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| SandboxError::InvalidRequest(format!("the trusted CA is not PEM: {e}")))?;
            roots.add(cert).map_err(|e| SandboxError::InvalidRequest(format!("the trusted CA is not usable: {e}")))?;
            extra += 1;
        }
    }
    tracing::debug!(system_roots = added, extra_roots = extra, "TLS roots for the sandbox edge");
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SandboxError::Unavailable(format!("TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(TlsConnector::from(Arc::new(config)))
}

/// A stream to `port` inside sandbox `id`, through the edge at `base`
/// (over TLS with `tls` when the edge is `https`).
pub(crate) async fn open(base: Option<&str>, tls: &TlsConnector, id: &SandboxId, port: u16) -> Result<PortStream, SandboxError> {
    let Some((secure, host, edge_port)) = edge(base) else {
        return Err(SandboxError::Unavailable(format!(
            "port {port} of sandbox {id} is reached only through a routing address (E2B_SANDBOX_URL)"
        )));
    };
    let unreachable = |e: &dyn std::fmt::Display| {
        SandboxError::Unavailable(format!("cannot reach the sandbox edge at {host}:{edge_port}: {e}"))
    };
    let connection = TcpStream::connect((host.as_str(), edge_port)).await.map_err(|e| unreachable(&e))?;
    if !secure {
        return Ok(Box::new(RoutedStream::new(connection, id.as_str(), port)));
    }
    let name = ServerName::try_from(host.clone()).map_err(|e| unreachable(&e))?;
    let connection = tls.connect(name, connection).await.map_err(|e| unreachable(&e))?;
    Ok(Box::new(RoutedStream::new(connection, id.as_str(), port)))
}

/// A connection to the edge that routes itself with its first request.
pub(crate) struct RoutedStream<S> {
    inner: S,
    /// What was written of the first request line so far; `None` once the
    /// routing headers are in.
    line: Option<Vec<u8>>,
    /// The routing headers, `Name: value\r\n` each.
    headers: Vec<u8>,
    /// Bytes taken from the writer and not yet on the connection.
    pending: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> RoutedStream<S> {
    pub fn new(inner: S, sandbox_id: &str, port: u16) -> Self {
        let headers = format!("{SANDBOX_ID_HEADER}: {sandbox_id}\r\n{SANDBOX_PORT_HEADER}: {port}\r\n").into_bytes();
        Self { inner, line: Some(Vec::new()), headers, pending: Vec::new() }
    }

    /// Writes out what is pending; ready once nothing is.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        while !self.pending.is_empty() {
            let written = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if written == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            self.pending.drain(..written);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RoutedStream<S> {
    /// A writer that reads without flushing (as one waits for an answer)
    /// still gets its request out: what is pending goes first.
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        if let Poll::Ready(Err(error)) = self.poll_pending(cx) {
            return Poll::Ready(Err(error));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RoutedStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_pending(cx))?;
        let Some(line) = this.line.as_mut() else {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        };
        line.extend_from_slice(buf);
        if let Some(end) = line.windows(2).position(|pair| pair == b"\r\n") {
            let mut first = std::mem::take(line);
            let rest = first.split_off(end + 2);
            first.extend_from_slice(&this.headers);
            first.extend_from_slice(&rest);
            this.pending = first;
            this.line = None;
            // Out at once where the connection takes it; the rest goes with
            // the next write, flush or read.
            if let Poll::Ready(Err(error)) = this.poll_pending(cx) {
                return Poll::Ready(Err(error));
            }
        } else if line.len() > MAX_REQUEST_LINE {
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the first request's line is too long to route",
            )));
        }
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// The routing headers go in after the request line however the writer
    /// splits its bytes, and the rest passes as written.
    #[tokio::test]
    async fn the_first_request_carries_the_routing_headers_and_the_rest_passes_as_written() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let received = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let mut bytes = Vec::new();
            socket.read_to_end(&mut bytes).await.expect("read");
            String::from_utf8(bytes).expect("text")
        });
        let mut stream = RoutedStream::new(TcpStream::connect(address).await.expect("connect"), "i1x", 9222);
        for piece in ["GET /json/ver", "sion HTTP/1.1\r", "\nHost: 127.0.0.1:9222\r\n\r\n", "GET /next HTTP/1.1\r\n\r\n"] {
            stream.write_all(piece.as_bytes()).await.expect("write");
        }
        stream.shutdown().await.expect("shutdown");
        let text = received.await.expect("received");
        assert_eq!(
            text,
            "GET /json/version HTTP/1.1\r\ne2b-sandbox-id: i1x\r\ne2b-sandbox-port: 9222\r\nHost: 127.0.0.1:9222\r\n\r\nGET /next HTTP/1.1\r\n\r\n"
        );
    }
}
