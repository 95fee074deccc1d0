//! A Flotilla sandbox host reached from its control plane's URL alone:
//! the host says where its edge listens (`GET /flotilla/v1/host`, behind
//! the same key as its other calls), and the client's settings follow,
//! with the fleet's `local` kind and a private CA trusted beside the
//! system's roots when one is named. A host that is not up yet is asked
//! again for a while (a worker may start before its host); a wrong key or
//! an answer of another kind fails at once.

use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use flotilla_config::{SandboxdClient, Secret};
use flotilla_sandbox::SandboxError;
use flotilla_types::task::SandboxProviderKind;
use reqwest::{StatusCode, Url};
use serde::Deserialize;

use super::api::API_KEY_HEADER;
use super::config::{E2bConfig, EnvdAddress};

/// Where a host says its edge is.
pub const HOST_PATH: &str = "/flotilla/v1/host";
/// How long a host that does not answer yet is waited for.
const WAIT_FOR_HOST: Duration = Duration::from_secs(30);

/// Why a sandbox host cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("FLOTILLA_SANDBOXD_CA_CERT: {0}")]
    CaCert(String),
    #[error("the sandbox host at {url} does not answer: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the sandbox host at {url} refused FLOTILLA_SANDBOXD_KEY")]
    KeyRefused { url: String },
    #[error("{url} is not a Flotilla sandbox host (status {status} to {HOST_PATH})")]
    NotAHost { url: String, status: u16 },
}

/// What the host answers.
#[derive(Debug, Deserialize)]
struct Where {
    edge_port: u16,
    tls: bool,
    domain: String,
}

/// An HTTP client with the provider's timeouts that trusts `extra_roots`
/// (PEM) beside the system's roots.
pub fn http_client(timeout: Duration, extra_roots: Option<&[u8]>) -> Result<reqwest::Client, SandboxError> {
    let mut builder = reqwest::Client::builder().timeout(timeout).connect_timeout(timeout.min(Duration::from_secs(10)));
    if let Some(pem) = extra_roots {
        let roots = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| SandboxError::InvalidRequest(format!("the trusted CA is not a PEM certificate: {e}")))?;
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    builder.build().map_err(|e| SandboxError::Unavailable(format!("cannot build an HTTP client: {e}")))
}

/// The provider's settings for the host `client` names.
pub async fn sandboxd_config(client: &SandboxdClient) -> Result<E2bConfig, HostError> {
    let extra_roots = match &client.ca_cert {
        Some(path) => Some(std::fs::read(path).map_err(|e| HostError::CaCert(format!("{}: {e}", path.display())))?),
        None => None,
    };
    let http = http_client(Duration::from_secs(10), extra_roots.as_deref()).map_err(|e| HostError::CaCert(e.to_string()))?;
    let answer = (|| ask(&http, &client.url, &client.key))
        .retry(ExponentialBuilder::default().with_max_delay(Duration::from_secs(2)).with_total_delay(Some(WAIT_FOR_HOST)))
        .when(|e| matches!(e, HostError::Unreachable { .. }))
        .await?;
    let mut config = E2bConfig::hosted(client.key.clone(), &answer.domain);
    config.api_url = client.url.clone();
    config.envd = EnvdAddress::Routed { base_url: edge_url(&client.url, &answer)? };
    config.kind = SandboxProviderKind::Local;
    config.extra_roots_pem = extra_roots;
    Ok(config)
}

async fn ask(http: &reqwest::Client, url: &str, key: &Secret) -> Result<Where, HostError> {
    let unreachable = |reason: String| HostError::Unreachable { url: url.to_owned(), reason };
    let response = http
        .get(format!("{url}{HOST_PATH}"))
        .header(API_KEY_HEADER, key.expose())
        .send()
        .await
        .map_err(|e| unreachable(error_chain(&e)))?;
    match response.status() {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => return Err(HostError::KeyRefused { url: url.to_owned() }),
        status if status.is_server_error() => return Err(unreachable(format!("status {status}"))),
        status => return Err(HostError::NotAHost { url: url.to_owned(), status: status.as_u16() }),
    }
    let status = response.status().as_u16();
    response.json::<Where>().await.map_err(|_| HostError::NotAHost { url: url.to_owned(), status })
}

/// The control plane's URL with the edge's scheme and port.
fn edge_url(url: &str, answer: &Where) -> Result<String, HostError> {
    let not_a_host = || HostError::NotAHost { url: url.to_owned(), status: 200 };
    let mut edge = Url::parse(url).map_err(|_| not_a_host())?;
    edge.set_scheme(if answer.tls { "https" } else { "http" }).map_err(|()| not_a_host())?;
    edge.set_port(Some(answer.edge_port)).map_err(|()| not_a_host())?;
    Ok(edge.as_str().trim_end_matches('/').to_owned())
}

/// An error with its causes, which name what failed (refused, TLS, DNS).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_edge_keeps_the_control_planes_host_name() {
        let answer = Where { edge_port: 49983, tls: true, domain: "localhost".into() };
        assert_eq!(edge_url("http://sandboxd.internal:49982", &answer).expect("url"), "https://sandboxd.internal:49983");
        let plain = Where { tls: false, ..answer };
        assert_eq!(edge_url("http://10.0.0.7:1/base", &plain).expect("url"), "http://10.0.0.7:49983/base");
    }
}
