//! The gateway's walls against a real local model server that counts what
//! reaches it: traversal and unlisted calls are refused before the provider
//! sees them, a token works on its own sandbox's socket only, budgets end in
//! 429 and oversized bodies in 413; on the TLS listener a token works only
//! with the client certificate issued with it. Requests go out as raw HTTP
//! (over TLS on the TCP listener), so no client normalises the paths under
//! test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::Secret;
use flotilla_types::ids::TaskId;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{ClientCredentials, GatewayConfig, GrantLimits, ModelGateway, TaskToken, MAX_REQUEST_BYTES};
use crate::sandbox::GatewayBridge;

/// A model server on a loopback port: every call is counted and answered
/// with a message that used 100 tokens.
async fn model_server() -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&hits);
    let app = axum::Router::new().fallback(move || {
        let counted = Arc::clone(&counted);
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            (
                [("content-type", "application/json")],
                r#"{"type":"message","content":[],"usage":{"input_tokens":60,"output_tokens":40}}"#,
            )
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binds");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, hits)
}

fn gateway(upstream: &str) -> ModelGateway {
    ModelGateway::new(GatewayConfig {
        upstream: upstream.into(),
        api_key: Secret::new("sk-real"),
        listen: "127.0.0.1:0".parse().expect("addr"),
        public_url: None,
        token_ttl: super::DEFAULT_TOKEN_TTL,
    })
}

/// Sends one raw HTTP/1.1 request and returns the status code.
async fn raw<S: AsyncRead + AsyncWrite + Unpin>(stream: S, method: &str, path: &str, token: &str, body: &[u8]) -> u16 {
    let (status, text) = raw_status(stream, method, path, token, body).await;
    status.unwrap_or_else(|| panic!("no HTTP answer: {text:?}"))
}

/// The same, and what came back when it was not an HTTP answer.
async fn raw_status<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    method: &str,
    path: &str,
    token: &str,
    body: &[u8],
) -> (Option<u16>, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: gateway\r\nx-api-key: {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    for chunk in body.chunks(64 * 1024) {
        if stream.write_all(chunk).await.is_err() {
            break;
        }
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text.starts_with("HTTP/1.").then(|| text.split_whitespace().nth(1).and_then(|code| code.parse().ok())).flatten();
    (status, text)
}

/// A TLS client that trusts the gateway's authority and presents `client`'s
/// certificate (or none).
fn tls_client(ca: &ClientCredentials, client: Option<&ClientCredentials>) -> tokio_rustls::TlsConnector {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.ca_pem.as_bytes()).expect("pem")).expect("root");
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("tls")
        .with_root_certificates(roots);
    let config = match client {
        Some(client) => {
            let cert = CertificateDer::from_pem_slice(client.cert_pem.as_bytes()).expect("pem");
            let key = PrivateKeyDer::from_pem_slice(client.key_pem.expose().as_bytes()).expect("pem");
            builder.with_client_auth_cert(vec![cert], key).expect("client auth")
        }
        None => builder.with_no_client_auth(),
    };
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// One request over TLS to the listener of `base_url`, trusting `ca`'s
/// authority and presenting `client`'s certificate; `None` when no HTTP
/// answer came (the handshake was refused).
async fn over_tls_as(
    base_url: &str,
    ca: &ClientCredentials,
    client: Option<&ClientCredentials>,
    (method, path): (&str, &str),
    token: &str,
    body: &[u8],
) -> Option<u16> {
    let addr = base_url.strip_prefix("https://").expect("the TCP listener is https");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connects");
    let name = ServerName::try_from("127.0.0.1").expect("name");
    let tls = tls_client(ca, client).connect(name, tcp).await.ok()?;
    raw_status(tls, method, path, token, body).await.0
}

/// A request as the sandbox holding `holder` makes it: over TLS with
/// `holder`'s client certificate, presenting `token`.
async fn over_tcp(holder: &TaskToken, method: &str, path: &str, token: &str, body: &[u8]) -> u16 {
    let credentials = holder.client_credentials().expect("a TLS token");
    over_tls_as(holder.base_url(), credentials, Some(credentials), (method, path), token, body)
        .await
        .unwrap_or_else(|| panic!("no HTTP answer to {method} {path}"))
}

async fn over_socket(socket: &PathBuf, method: &str, path: &str, token: &str, body: &[u8]) -> u16 {
    raw(tokio::net::UnixStream::connect(socket).await.expect("connects"), method, path, token, body).await
}

const MESSAGE: &[u8] = br#"{"model":"claude-test","max_tokens":10,"messages":[]}"#;

#[tokio::test]
async fn gateway_refuses_traversal_and_unlisted_calls_without_reaching_the_provider() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let token = gateway.grant(&TaskId::generate(), Duration::from_secs(60)).await.expect("granted");
    let refused = [
        ("GET", "/v1/models/../organizations/api_keys"),
        ("GET", "/v1/models/%2e%2e/files"),
        ("GET", "/v1/models/%2E%2E/organizations/api_keys"),
        ("GET", "/v1/models/..%2forganizations"),
        ("POST", "/v1/messages/../files"),
        ("GET", "/v1//models"),
        ("GET", "/v1/messages"),
        ("POST", "/v1/models"),
        ("DELETE", "/v1/models/claude-test"),
        ("POST", "/v1/messages/batches"),
        ("POST", "/v1/files"),
        ("GET", "/v1/organizations/api_keys"),
        ("PUT", "/v1/messages"),
    ];
    for (method, path) in refused {
        assert_eq!(over_tcp(&token, method, path, token.token(), b"{}").await, 403, "{method} {path}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a refused call reached the model server");
    for (method, path, body) in [
        ("POST", "/v1/messages", MESSAGE),
        ("POST", "/v1/messages?beta=true", MESSAGE),
        ("POST", "/v1/messages/count_tokens", MESSAGE),
        ("GET", "/v1/models", &b""[..]),
        ("GET", "/v1/models/claude-test", &b""[..]),
    ] {
        assert_eq!(over_tcp(&token, method, path, token.token(), body).await, 200, "{method} {path}");
    }
    assert_eq!(hits.load(Ordering::SeqCst), 5);
}

#[tokio::test]
async fn gateway_token_works_only_on_its_own_sandboxes_socket() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let dir = std::env::temp_dir().join(format!("flotilla-gateway-test-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bridge = |name: &str| GatewayBridge { socket: dir.join(name), url: "http://127.0.0.1:4780".into() };
    let (a, b) = (bridge("a.sock"), bridge("b.sock"));
    let limits = GrantLimits::default();
    let token_a = gateway.grant_with(&TaskId::generate(), Duration::from_secs(60), limits.clone(), Some(&a)).await.expect("a");
    let token_b = gateway.grant_with(&TaskId::generate(), Duration::from_secs(60), limits, Some(&b)).await.expect("b");
    let tcp = gateway.grant(&TaskId::generate(), Duration::from_secs(60)).await.expect("tcp");
    assert_eq!(over_socket(&b.socket, "POST", "/v1/messages", token_a.token(), MESSAGE).await, 401, "a's token on b's socket");
    assert_eq!(over_socket(&a.socket, "POST", "/v1/messages", token_b.token(), MESSAGE).await, 401, "b's token on a's socket");
    assert_eq!(over_tcp(&tcp, "POST", "/v1/messages", token_a.token(), MESSAGE).await, 401, "a's token on TCP");
    assert_eq!(over_socket(&a.socket, "POST", "/v1/messages", tcp.token(), MESSAGE).await, 401, "a TCP token on a's socket");
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert_eq!(over_socket(&a.socket, "POST", "/v1/messages", token_a.token(), MESSAGE).await, 200);
    assert_eq!(over_socket(&b.socket, "POST", "/v1/messages", token_b.token(), MESSAGE).await, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    drop(token_a);
    assert!(!a.socket.exists(), "the socket goes with its token");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn gateway_budgets_and_models_are_enforced() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let task = TaskId::generate();
    let ttl = Duration::from_secs(60);
    let requests = GrantLimits { max_requests: 2, ..GrantLimits::default() };
    let by_requests = gateway.grant_with(&task, ttl, requests, None).await.expect("granted");
    for expected in [200, 200, 429, 429] {
        assert_eq!(over_tcp(&by_requests, "POST", "/v1/messages", by_requests.token(), MESSAGE).await, expected);
    }
    // Each answer used 100 tokens: a budget of 150 allows two calls.
    let tokens = GrantLimits { max_tokens: Some(150), ..GrantLimits::default() };
    let by_tokens = gateway.grant_with(&task, ttl, tokens, None).await.expect("granted");
    for expected in [200, 200, 429] {
        assert_eq!(over_tcp(&by_tokens, "POST", "/v1/messages", by_tokens.token(), MESSAGE).await, expected);
    }
    let models = GrantLimits { models: Some(vec!["claude-other".into()]), ..GrantLimits::default() };
    let by_model = gateway.grant_with(&task, ttl, models, None).await.expect("granted");
    assert_eq!(over_tcp(&by_model, "POST", "/v1/messages", by_model.token(), MESSAGE).await, 403);
    assert_eq!(hits.load(Ordering::SeqCst), 4, "refused calls never reach the model server");
}

#[tokio::test]
async fn gateway_refuses_a_20_mib_body() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let token = gateway.grant(&TaskId::generate(), Duration::from_secs(60)).await.expect("granted");
    let body = vec![b' '; 20 * 1024 * 1024];
    assert!(body.len() > MAX_REQUEST_BYTES);
    assert_eq!(over_tcp(&token, "POST", "/v1/messages", token.token(), &body).await, 413);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn gateway_tls_token_works_only_with_the_certificate_issued_with_it() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let ttl = Duration::from_secs(60);
    let a = gateway.grant(&TaskId::generate(), ttl).await.expect("a");
    let b = gateway.grant(&TaskId::generate(), ttl).await.expect("b");
    assert!(a.base_url().starts_with("https://127.0.0.1:"), "{}", a.base_url());
    let (creds_a, creds_b) = (a.client_credentials().expect("tls"), b.client_credentials().expect("tls"));
    let call = ("POST", "/v1/messages");
    // A's token from the sandbox that holds B's certificate, and the reverse.
    assert_eq!(over_tls_as(a.base_url(), creds_a, Some(creds_b), call, a.token(), MESSAGE).await, Some(401));
    assert_eq!(over_tls_as(a.base_url(), creds_a, Some(creds_a), call, b.token(), MESSAGE).await, Some(401));
    // No client certificate, or one of another gateway's authority: no handshake.
    assert_eq!(over_tls_as(a.base_url(), creds_a, None, call, a.token(), MESSAGE).await, None);
    let elsewhere = self::gateway(&upstream);
    let other = elsewhere.grant(&TaskId::generate(), ttl).await.expect("other");
    let foreign = other.client_credentials().expect("tls");
    assert_eq!(over_tls_as(a.base_url(), creds_a, Some(foreign), call, a.token(), MESSAGE).await, None);
    // Plain HTTP gets no HTTP answer.
    let addr = a.base_url().trim_start_matches("https://");
    let plain =
        raw_status(tokio::net::TcpStream::connect(addr).await.expect("connects"), "POST", "/v1/messages", a.token(), MESSAGE);
    assert_eq!(plain.await.0, None, "the TCP listener speaks TLS only");
    assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing refused reached the model server");
    assert_eq!(over_tcp(&a, "POST", "/v1/messages", a.token(), MESSAGE).await, 200);
    assert_eq!(over_tcp(&b, "POST", "/v1/messages", b.token(), MESSAGE).await, 200);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    // The certificate without a live token is worth nothing.
    let token_a = a.token().to_owned();
    let held = creds_a.clone();
    drop(a);
    assert_eq!(over_tls_as(b.base_url(), &held, Some(&held), call, &token_a, MESSAGE).await, Some(401));
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn gateway_holds_a_call_until_the_answers_before_it_are_counted_and_sends_none_after_a_stop() {
    let (upstream, hits) = model_server().await;
    let gateway = gateway(&upstream);
    let mut token = gateway.grant(&TaskId::generate(), Duration::from_secs(60)).await.expect("granted");
    let mut calls = token.calls().expect("the reports");
    assert_eq!(over_tcp(&token, "POST", "/v1/messages", token.token(), MESSAGE).await, 200);
    let first = calls.next().await.expect("the first call's report");
    assert_eq!((first.tokens.input, first.tokens.output), (60, 40));

    let token = Arc::new(token);
    let asking = Arc::clone(&token);
    let second = tokio::spawn(async move { over_tcp(&asking, "POST", "/v1/messages", asking.token(), MESSAGE).await });
    // The sleep is what is tested: for 300 ms, the second call waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the second call waits while the first is not counted");
    calls.counted(false);
    assert_eq!(second.await.expect("joins"), 200);
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    calls.next().await.expect("the second call's report");
    calls.counted(true);
    assert_eq!(over_tcp(&token, "POST", "/v1/messages", token.token(), MESSAGE).await, 429, "after a stop");
    assert_eq!(hits.load(Ordering::SeqCst), 2, "no call reaches the provider after the stop");
}
