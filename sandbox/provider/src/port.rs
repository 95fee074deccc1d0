//! A byte stream to a TCP port on a sandbox's own loopback, for services
//! that must stay inside the sandbox's network (Chromium's DevTools port):
//! the provider carries the bytes through a relay process it starts inside
//! the sandbox, so the port is never bound on the host's network and only
//! the process holding the stream reaches it.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// Something that reads and writes bytes, as a stream to a port does.
pub trait Duplex: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> Duplex for T {}

/// A stream to a port inside a sandbox.
pub type PortStream = Box<dyn Duplex>;

/// A relay process inside the sandbox whose standard input and output are
/// the two directions of a connection to the port; killed when dropped.
pub struct RelayProcess {
    /// Held for its `kill_on_drop`.
    _child: Child,
    to_port: ChildStdin,
    from_port: ChildStdout,
}

impl RelayProcess {
    /// The stream of a relay started with piped standard input and output;
    /// `None` when either pipe is missing.
    pub fn new(mut child: Child) -> Option<Self> {
        let to_port = child.stdin.take()?;
        let from_port = child.stdout.take()?;
        Some(Self { _child: child, to_port, from_port })
    }
}

impl AsyncRead for RelayProcess {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.from_port).poll_read(cx, buf)
    }
}

impl AsyncWrite for RelayProcess {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.to_port).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.to_port).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.to_port).poll_shutdown(cx)
    }
}
