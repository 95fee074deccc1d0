//! A Flotilla sandbox host reached from its control plane's URL alone:
//! the host says where its edge listens (`GET /flotilla/v1/host`, behind
//! the same key as its other calls), and the client's settings follow,
//! with the fleet's `local` kind and a private CA trusted beside the
//! system's roots when one is named. A host that refuses connections or
//! answers 5xx is asked again for 30 s (a worker may start before its
//! host); a certificate not trusted, a wrong key or an answer of another
//! kind fails at once.

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
    #[error("the sandbox host at {url} is not up: {reason}")]
    NotUp { url: String, reason: String },
    #[error("the sandbox host at {url} does not answer: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("the sandbox host at {url} refused FLOTILLA_SANDBOXD_KEY")]
    KeyRefused { url: String },
    #[error("{url} is not a Flotilla sandbox host (status {status} to {HOST_PATH})")]
    NotAHost { url: String, status: u16 },
    #[error("the sandbox host's client: {0}")]
    Client(String),
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
    let builder = trusting(extra_roots)?.timeout(timeout).connect_timeout(timeout.min(Duration::from_secs(10)));
    builder.build().map_err(|e| SandboxError::Unavailable(format!("cannot build an HTTP client: {e}")))
}

/// A client for a sandbox's live stream: no limit on a connection's life
/// (it carries the stream), and a fresh connection per stream, since an
/// edge routes a whole connection by its first request (a connection kept
/// from an envd call would take the stream's upgrade to envd).
pub fn stream_client(extra_roots: Option<&[u8]>) -> Result<reqwest::Client, SandboxError> {
    let builder = trusting(extra_roots)?.connect_timeout(Duration::from_secs(10)).pool_max_idle_per_host(0);
    builder.build().map_err(|e| SandboxError::Unavailable(format!("cannot build an HTTP client: {e}")))
}

fn trusting(extra_roots: Option<&[u8]>) -> Result<reqwest::ClientBuilder, SandboxError> {
    let mut builder = reqwest::Client::builder();
    if let Some(pem) = extra_roots {
        let roots = reqwest::Certificate::from_pem_bundle(pem)
            .map_err(|e| SandboxError::InvalidRequest(format!("the trusted CA is not a PEM certificate: {e}")))?;
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    Ok(builder)
}

/// The provider's settings for the host `client` names, waiting a while
/// for a host that is not up yet (a worker starting beside its host).
pub async fn sandboxd_config(client: &SandboxdClient) -> Result<E2bConfig, HostError> {
    configure(client, WAIT_FOR_HOST).await
}

/// The same, without waiting: a host that is not up now fails at once.
pub async fn sandboxd_config_now(client: &SandboxdClient) -> Result<E2bConfig, HostError> {
    configure(client, Duration::ZERO).await
}

async fn configure(client: &SandboxdClient, wait: Duration) -> Result<E2bConfig, HostError> {
    let extra_roots = match &client.ca_cert {
        Some(path) => Some(std::fs::read(path).map_err(|e| HostError::CaCert(format!("{}: {e}", path.display())))?),
        None => None,
    };
    let http = http_client(Duration::from_secs(10), extra_roots.as_deref()).map_err(|e| HostError::CaCert(e.to_string()))?;
    let answer = (|| ask(&http, &client.url, &client.key))
        .retry(
            ExponentialBuilder::default().with_max_delay(Duration::from_secs(2)).without_max_times().with_total_delay(Some(wait)),
        )
        .when(|e| matches!(e, HostError::NotUp { .. }))
        .await?;
    let mut config = E2bConfig::hosted(client.key.clone(), &answer.domain);
    config.api_url = client.url.clone();
    config.envd = EnvdAddress::Routed { base_url: edge_url(&client.url, &answer)? };
    config.kind = SandboxProviderKind::Local;
    config.extra_roots_pem = extra_roots;
    Ok(config)
}

async fn ask(http: &reqwest::Client, url: &str, key: &Secret) -> Result<Where, HostError> {
    let not_up = |reason: String| HostError::NotUp { url: url.to_owned(), reason };
    let response = match http.get(format!("{url}{HOST_PATH}")).header(API_KEY_HEADER, key.expose()).send().await {
        Ok(response) => response,
        Err(e) if refused(&e) => return Err(not_up(error_chain(&e))),
        Err(e) => return Err(HostError::Unreachable { url: url.to_owned(), reason: error_chain(&e) }),
    };
    match response.status() {
        StatusCode::OK => {}
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => return Err(HostError::KeyRefused { url: url.to_owned() }),
        status if status.is_server_error() => return Err(not_up(format!("status {status}"))),
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

/// Whether nothing listens at the address yet (asked again), as opposed to
/// an address that answers wrongly (a certificate not trusted, no such name).
fn refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(cause) = source {
        if cause.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused) {
            return true;
        }
        source = cause.source();
    }
    false
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
