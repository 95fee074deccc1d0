//! The Desktop SDK's stream in a stand-in sandbox: started with the SDK's
//! commands, its page reached through host routing (`6080-<id>.<domain>`)
//! at the SDK's URL, its WebSocket through the routing headers, opened
//! only with its key and showing that sandbox's own screen and pointer;
//! stopped, nothing of it is left.

use std::time::Duration;

use flotilla_sandboxd::SANDBOX_DOMAIN;

use super::e2b_tests::fixture;
use crate::live::remote::{RemoteDesktop, RemoteError, RemoteRfb};
use crate::sandbox::e2b::E2bProvider;
use crate::sandbox::{suite, SandboxError, SandboxId, SandboxProvider};

const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

fn remote(provider: &E2bProvider, id: &SandboxId, password: &str) -> RemoteDesktop {
    let socket = provider.stream_socket(id);
    RemoteDesktop { url: socket.url, headers: socket.headers, password: password.to_owned(), client: reqwest::Client::new() }
}

/// Where the sandbox's pointer is, read with xdotool.
async fn pointer(provider: &E2bProvider, id: &SandboxId) -> (u32, u32) {
    let output = provider.run(id, "xdotool getmouselocation --shell", COMMAND_TIMEOUT).await.expect("xdotool");
    let field = |name: &str| output.stdout.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix('=')?.parse().ok());
    (field("X").unwrap_or(u32::MAX), field("Y").unwrap_or(u32::MAX))
}

/// The stream's page through the edge, addressed by host as a browser does.
async fn page(port: u16, id: &SandboxId) -> reqwest::Response {
    reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/vnc.html"))
        .header("host", format!("6080-{id}.{SANDBOX_DOMAIN}:{port}"))
        .send()
        .await
        .expect("the edge answers")
}

#[tokio::test]
async fn sandbox_e2b_stream_serves_the_desktop_on_6080() {
    let (_fake, provider) = fixture().await;
    let sandbox = suite::create(&provider, (800, 600)).await;
    let id = &sandbox.id;
    let stream = provider.start_stream(id).await.expect("the stream starts");
    let key = stream.key.clone();
    let again = provider.start_stream(id).await;
    assert!(matches!(&again, Err(SandboxError::Display(m)) if m.contains("already running")), "{again:?}");

    let port = provider.stream_origin().port.expect("the stand-in's port");
    let url = provider.stream_page_url(id, true, &key);
    let expected = format!(
        "http://6080-{id}.{SANDBOX_DOMAIN}:{port}/vnc.html?autoconnect=true&view_only=true&resize=scale&password={}",
        key.expose()
    );
    assert_eq!(url, expected, "the Desktop SDK's getUrl() form");
    let served = page(port, id).await;
    assert_eq!(served.status(), 200);
    assert!(served.text().await.expect("the page").contains("noVNC"));

    let mut rfb = RemoteRfb::open(&remote(&provider, id, key.expose())).await.expect("the key opens the stream");
    rfb.send(&[1]).await.expect("ClientInit");
    let init = rfb.read_exact(24).await.expect("ServerInit");
    let size = (u16::from_be_bytes([init[0], init[1]]), u16::from_be_bytes([init[2], init[3]]));
    assert_eq!(size, (800, 600), "the stream shows this sandbox's screen");
    let name_len = u32::from_be_bytes([init[20], init[21], init[22], init[23]]) as usize;
    rfb.read_exact(name_len).await.expect("the desktop's name");
    // A pointer event through the stream moves this sandbox's pointer.
    rfb.send(&[5, 0, 0, 123, 0, 45]).await.expect("PointerEvent");
    suite::eventually("the pointer to follow the stream", || async { (pointer(&provider, id).await == (123, 45)).then_some(()) })
        .await;
    rfb.close().await;

    match RemoteRfb::open(&remote(&provider, id, "not-the-key-0000")).await {
        Err(RemoteError::Handshake(message)) => assert!(message.contains("refused"), "{message}"),
        Err(other) => panic!("a wrong key fails otherwise: {other}"),
        Ok(_) => panic!("a wrong key opens the stream"),
    }

    provider.stop_stream(id, stream).await.expect("the stream stops");
    let left =
        provider.run(id, "pgrep -x x11vnc; netstat -tuln | grep -c ':5900 \\|:6080 '", COMMAND_TIMEOUT).await.expect("run");
    assert_eq!(left.stdout.trim(), "0", "x11vnc or noVNC still runs: {left:?}");
    let closed = page(port, id).await;
    assert_eq!(closed.status(), 502);
    assert!(closed.text().await.expect("the edge's error").contains("port is not open"));
    provider.kill(id).await.expect("kill");
}
