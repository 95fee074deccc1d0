//! The host's edge, like E2B's client proxy: every connection's first
//! request names a sandbox and a port, either with the `E2b-Sandbox-Id` and
//! `E2b-Sandbox-Port` headers or with a `Host` of `<port>-<id>.<domain>`.
//! envd's port goes to the host's envd; any other port is carried, bytes as
//! they are (WebSocket upgrades included), to that port inside the
//! sandbox's own network through a `socat` started in the sandbox. The
//! edge's errors are E2B's: `502` "The sandbox was not found", `502` "The
//! sandbox is running but port is not open". The whole connection goes
//! where its first request went. With TLS configured, each connection's
//! handshake comes first, in its own task.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use super::host::Host;
use flotilla_e2b::envd::{ENVD_PORT, SANDBOX_ID_HEADER, SANDBOX_PORT_HEADER};

/// The longest request head read before routing.
const MAX_HEAD: usize = 32 * 1024;

/// A sandbox port a request is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Destination {
    pub id: String,
    pub port: u16,
}

/// Where a request goes, from its routing headers or else its `Host`.
pub(super) fn destination(header: impl Fn(&str) -> Option<String>) -> Option<Destination> {
    if let Some(id) = header(SANDBOX_ID_HEADER) {
        let port = header(SANDBOX_PORT_HEADER)?.trim().parse().ok()?;
        return Some(Destination { id: id.trim().to_owned(), port });
    }
    let host = header("host")?;
    let label = host.split('.').next()?;
    let (port, id) = label.split_once('-')?;
    Some(Destination { id: id.to_owned(), port: port.parse().ok()? })
}

/// Serves the edge on `listener` until `shutdown`, over TLS when given an
/// acceptor; its base URL.
pub(super) fn serve(
    host: Arc<Host>,
    listener: TcpListener,
    envd: SocketAddr,
    tls: Option<TlsAcceptor>,
    shutdown: &CancellationToken,
) -> String {
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let scheme = if tls.is_some() { "https" } else { "http" };
    let stop = shutdown.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((client, _)) = accepted else { continue };
            // Frames pass through as they come (no Nagle delay), as envd sends them.
            let _ = client.set_nodelay(true);
            let (host, stop, tls) = (Arc::clone(&host), stop.clone(), tls.clone());
            tokio::spawn(async move {
                let carried = async move {
                    match tls {
                        Some(acceptor) => {
                            if let Some(client) = super::tls::handshake(&acceptor, client).await {
                                carry(host, envd, client).await;
                            }
                        }
                        None => carry(host, envd, client).await,
                    }
                };
                tokio::select! {
                    () = stop.cancelled() => {}
                    () = carried => {}
                }
            });
        }
    });
    format!("{scheme}://{address}")
}

/// Reads the first request head, then carries the connection to its destination.
async fn carry<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(host: Arc<Host>, envd: SocketAddr, mut client: S) {
    let Some(head) = read_head(&mut client).await else { return };
    let text = String::from_utf8_lossy(&head).into_owned();
    let header = |name: &str| {
        text.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim().eq_ignore_ascii_case(name).then(|| value.trim().to_owned())
        })
    };
    let Some(to) = destination(header) else {
        refuse(&mut client, "", "The sandbox was not found").await;
        return;
    };
    if to.port == ENVD_PORT {
        let Ok(mut upstream) = TcpStream::connect(envd).await else { return };
        let _ = upstream.set_nodelay(true);
        if upstream.write_all(&head).await.is_ok() {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
        return;
    }
    let Some(sandbox) = host.live(&to.id).await else {
        refuse(&mut client, &to.id, "The sandbox was not found").await;
        return;
    };
    let target = format!("TCP:127.0.0.1:{}", to.port);
    let Ok(mut command) = host.local.command(&sandbox.local_id, "socat", &["STDIO", &target]).await else {
        refuse(&mut client, &to.id, "The sandbox was not found").await;
        return;
    };
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::null());
    let Ok(mut socat) = command.spawn() else { return };
    let (Some(mut to_port), Some(mut from_port)) = (socat.stdin.take(), socat.stdout.take()) else { return };
    if to_port.write_all(&head).await.is_err() {
        return;
    }
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let inbound = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut to_port).await;
    });
    let mut chunk = vec![0u8; 64 * 1024];
    let mut answered = false;
    while let Ok(n @ 1..) = from_port.read(&mut chunk).await {
        answered = true;
        if client_write.write_all(&chunk[..n]).await.is_err() {
            break;
        }
    }
    if !answered {
        let body = error_body(&to.id, "The sandbox is running but port is not open");
        let _ = client_write.write_all(body.as_bytes()).await;
    }
    // The port closed its side: so does the client's (over TLS with a
    // close_notify, which a TLS client needs to take the end as the end).
    let _ = client_write.shutdown().await;
    inbound.abort();
    let _ = socat.start_kill();
    let _ = socat.wait().await;
}

/// The request head, up to and including the blank line.
async fn read_head(client: &mut (impl AsyncRead + Unpin)) -> Option<Vec<u8>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_HEAD || client.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        head.push(byte[0]);
    }
    Some(head)
}

async fn refuse(client: &mut (impl AsyncWrite + Unpin), id: &str, message: &str) {
    let _ = client.write_all(error_body(id, message).as_bytes()).await;
}

/// The edge's `502` with its JSON body.
fn error_body(id: &str, message: &str) -> String {
    let body = serde_json::json!({"sandboxId": id, "message": message, "code": 502}).to_string();
    format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.to_string())
    }

    #[test]
    fn requests_are_routed_by_header_or_host() {
        let routed = destination(headers(&[("Host", "127.0.0.1:4000"), ("E2b-Sandbox-Id", "i1"), ("E2b-Sandbox-Port", "6080")]));
        assert_eq!(routed, Some(Destination { id: "i1".into(), port: 6080 }));
        let hosted = destination(headers(&[("Host", "6080-i1x.localhost:4000")]));
        assert_eq!(hosted, Some(Destination { id: "i1x".into(), port: 6080 }));
        assert_eq!(destination(headers(&[("Host", "localhost:4000")])), None);
        assert_eq!(destination(headers(&[("Host", "x-i1.localhost")])), None);
    }
}
