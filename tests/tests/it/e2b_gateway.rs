//! The model gateway as E2B sandboxes reach it: over the network, TLS only,
//! each token bound to the sandbox it was handed to. The sandboxes come from
//! the protocol-faithful E2B server (real local desktops in their jails; the
//! host's own address stands in for the gateway's public address, reachable
//! through the sandbox's way out as a hosted sandbox reaches the internet),
//! driven through envd as the pipeline drives them. Inside, `curl` calls the
//! gateway with what each sandbox was given: the gateway authority's
//! certificate, its client certificate and key, and its token.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::Secret;
use flotilla_sandbox::suite::host_address;
use flotilla_sandboxd::Sandboxd;
use flotilla_tests::fakes::anthropic::final_answer;
use flotilla_tests::fakes::ScriptedServer;
use flotilla_types::ids::TaskId;
use flotilla_worker::gateway::{GatewayConfig, ModelGateway, TaskToken};
use flotilla_worker::sandbox::{E2bProvider, SandboxId, SandboxProvider, SandboxRequest};

const REAL_KEY: &str = "sk-ant-api03-flotilla-real-key-e2b-tls";
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);

/// Writes `token`'s credentials into the sandbox's `gw/` directory.
async fn hand_over(provider: &E2bProvider, id: &SandboxId, token: &TaskToken) {
    let credentials = token.client_credentials().expect("a token of the TLS listener has credentials");
    for (name, text) in [
        ("gw/ca.pem", &credentials.ca_pem),
        ("gw/client.pem", &credentials.cert_pem),
        ("gw/key.pem", &credentials.key_pem.expose().to_owned()),
    ] {
        provider.write_file(id, name, text.as_bytes()).await.expect("written into the sandbox");
    }
}

/// What `curl` inside sandbox `id` gets for a model call to `url` with
/// `token`: the HTTP status, or `000` when no HTTP answer came; `tls`
/// names the curl options for trust and the client certificate.
async fn call_from(provider: &E2bProvider, id: &SandboxId, url: &str, token: &str, tls: &str) -> String {
    let body = r#"{"model":"claude-sonnet-4-5","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}"#;
    let command = format!(
        "cd \"$HOME\" && curl -sS -o /dev/null -w '%{{http_code}}' --max-time 10 {tls} -H 'x-api-key: {token}' \
         -H 'anthropic-version: 2023-06-01' -H 'content-type: application/json' -d '{body}' {url}/v1/messages"
    );
    let output = provider.run(id, &command, COMMAND_TIMEOUT).await.expect("the command runs");
    output.stdout.trim().to_owned()
}

const WITH_OWN_CERT: &str = "--cacert gw/ca.pem --cert gw/client.pem --key gw/key.pem";

#[tokio::test]
async fn sandbox_e2b_gateway_speaks_tls_and_a_token_fails_from_another_sandbox() {
    let host = host_address();
    let api = ScriptedServer::start().await;
    let gateway = ModelGateway::new(GatewayConfig {
        upstream: api.url(),
        api_key: Secret::new(REAL_KEY),
        listen: SocketAddr::from((host, 0)),
        public_url: None,
        token_ttl: flotilla_worker::gateway::DEFAULT_TOKEN_TTL,
    });
    let fake = Sandboxd::start_with_internet(vec![host]).await;
    let provider = Arc::new(E2bProvider::new(fake.config()).expect("provider"));
    let request = SandboxRequest { resolution: (800, 600), ..SandboxRequest::default() };
    let a = provider.create(&request).await.expect("sandbox a").id;
    let b = provider.create(&request).await.expect("sandbox b").id;

    let token_a = gateway.grant(&TaskId::generate(), Duration::from_secs(120)).await.expect("a's token");
    let token_b = gateway.grant(&TaskId::generate(), Duration::from_secs(120)).await.expect("b's token");
    let url = token_a.base_url().to_owned();
    assert!(url.starts_with(&format!("https://{host}:")), "the sandbox calls an https URL: {url}");
    hand_over(&provider, &a, &token_a).await;
    hand_over(&provider, &b, &token_b).await;

    // A's token, taken to sandbox B: refused there, whatever B presents.
    assert_eq!(call_from(&provider, &b, &url, token_a.token(), WITH_OWN_CERT).await, "401", "a's token from b");
    assert_eq!(call_from(&provider, &b, &url, token_a.token(), "--cacert gw/ca.pem").await, "000", "no client certificate");
    assert_eq!(call_from(&provider, &b, &url, token_a.token(), "--insecure").await, "000", "no client certificate");
    // The listener speaks TLS only: plain HTTP gets no HTTP answer.
    let plain = url.replacen("https://", "http://", 1);
    assert_eq!(call_from(&provider, &b, &plain, token_a.token(), "").await, "000", "plain HTTP");
    // Without the authority's certificate the sandbox does not trust the server.
    assert_eq!(call_from(&provider, &a, &url, token_a.token(), "--cert gw/client.pem --key gw/key.pem").await, "000");
    assert!(api.received().is_empty(), "nothing refused reached the model server: {:?}", api.received());

    // Each sandbox's own token with its own certificate works.
    api.push(final_answer("hello from a"));
    api.push(final_answer("hello from b"));
    assert_eq!(call_from(&provider, &a, &url, token_a.token(), WITH_OWN_CERT).await, "200", "a from a");
    assert_eq!(call_from(&provider, &b, &url, token_b.token(), WITH_OWN_CERT).await, "200", "b from b");
    let calls = api.received();
    assert_eq!(calls.len(), 2);
    for call in &calls {
        assert_eq!(call.header("x-api-key"), Some(REAL_KEY), "the gateway swapped in the real key");
    }

    // Revoked with its task, the token fails even with its own certificate.
    let revoked = token_a.token().to_owned();
    drop(token_a);
    assert_eq!(call_from(&provider, &a, &url, &revoked, WITH_OWN_CERT).await, "401");
    for id in [&a, &b] {
        provider.kill(id).await.expect("killed");
    }
    drop(token_b);
}
