//! TLS on the host's two listeners, for a host that serves workers and SDK
//! users on other machines: the operator's certificate chain and key (PEM
//! files named by `FLOTILLA_SANDBOXD_TLS_CERT` and `_KEY`), read once at
//! start, served with rustls (HTTP/1.1, TLS 1.2 and 1.3). A host without
//! them serves plain HTTP, and only on loopback.

use std::sync::Arc;
use std::time::Duration;

use flotilla_config::TlsFiles;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the accept loop rests after the listener fails to accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// The TLS set-up of `files`, or one line saying which file is wrong.
pub fn acceptor(files: &TlsFiles) -> Result<TlsAcceptor, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .and_then(Iterator::collect)
        .map_err(|e| format!("FLOTILLA_SANDBOXD_TLS_CERT: {}: {e}", files.cert.display()))?;
    if chain.is_empty() {
        return Err(format!("FLOTILLA_SANDBOXD_TLS_CERT: {} holds no certificate", files.cert.display()));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key)
        .map_err(|e| format!("FLOTILLA_SANDBOXD_TLS_KEY: {}: {e}", files.key.display()))?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|builder| builder.with_no_client_auth().with_single_cert(chain, key))
        .map_err(|e| format!("FLOTILLA_SANDBOXD_TLS_KEY: the key does not serve the certificate: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// The TLS side of a connection once its handshake completed in time;
/// `None` (logged at debug level) when it did not.
pub async fn handshake(acceptor: &TlsAcceptor, tcp: TcpStream) -> Option<TlsStream<TcpStream>> {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => Some(tls),
        Ok(Err(error)) => {
            tracing::debug!(%error, "a TLS handshake with the sandbox host failed");
            None
        }
        Err(_) => {
            tracing::debug!("a TLS handshake with the sandbox host timed out");
            None
        }
    }
}

/// Serves `router` over TLS on `listener` until `shutdown`; its base URL.
pub fn serve(listener: TcpListener, acceptor: TlsAcceptor, router: axum::Router, shutdown: &CancellationToken) -> String {
    let address = listener.local_addr().map(|a| a.to_string()).unwrap_or_default();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        // Handshakes run beside the accept loop, so a slow client holds up no other.
        loop {
            let accepted = tokio::select! {
                () = stop.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            let Ok((tcp, _)) = accepted else {
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, router, stop) = (acceptor.clone(), router.clone(), stop.clone());
            tokio::spawn(async move {
                let Some(tls) = handshake(&acceptor, tcp).await else { return };
                let service = TowerToHyperService::new(router);
                let connection =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service).with_upgrades();
                tokio::select! {
                    served = connection => if let Err(error) = served { tracing::debug!(%error, "a sandbox host connection ended") },
                    () = stop.cancelled() => {}
                }
            });
        }
    });
    format!("https://{address}")
}
