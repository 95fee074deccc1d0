//! TLS on the gateway's TCP listener, the way sandboxes on other machines
//! (E2B) reach it over a network nobody vouches for.
//!
//! When the listener starts, the gateway makes a certificate authority of
//! its own (in memory only, gone with the process) and with it a server
//! certificate for every name sandboxes call it by. Each token granted on
//! this listener comes with a client certificate of that authority, made for
//! it alone; the sandbox gets the token, that certificate and key, and the
//! authority's certificate to trust the server by. The listener admits only
//! clients that present a certificate of the authority, and the gateway
//! accepts a token only on a connection whose client certificate is the one
//! issued with it (a certificate-bound token, as in RFC 8705): a token copied
//! into another sandbox is refused there, since that sandbox holds another
//! certificate. Plain HTTP and clients without a certificate never get past
//! the handshake.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_config::Secret;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::WebPkiClientVerifier;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

/// How long a client may take to finish its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the accept loop rests after the listener fails to accept.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(20);

/// Why the gateway could not set up TLS.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot make a certificate: {0}")]
    Certificate(#[from] rcgen::Error),
    #[error("cannot configure TLS: {0}")]
    Config(String),
}

/// The SHA-256 digest of a client certificate (DER): what a token is
/// bound to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    fn of(der: &[u8]) -> Self {
        Self(Sha256::digest(der).into())
    }
}

impl std::fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short: String = self.0[..6].iter().map(|b| format!("{b:02x}")).collect();
        write!(f, "Fingerprint({short}…)")
    }
}

/// What a sandbox needs to call the TLS listener with one token: the
/// authority's certificate (to trust the server), and the client
/// certificate and key issued with the token, all PEM.
#[derive(Clone)]
pub struct ClientCredentials {
    pub ca_pem: String,
    pub cert_pem: String,
    pub key_pem: Secret,
}

impl std::fmt::Debug for ClientCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCredentials").finish_non_exhaustive()
    }
}

impl ClientCredentials {
    /// An HTTP client that calls the gateway as a sandbox holding these
    /// credentials does: it trusts the gateway's authority alone and
    /// presents the client certificate.
    pub fn http_client(&self) -> Result<reqwest::Client, reqwest::Error> {
        let mut identity = self.cert_pem.clone().into_bytes();
        identity.extend_from_slice(self.key_pem.expose().as_bytes());
        reqwest::Client::builder()
            .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?])
            .identity(reqwest::Identity::from_pem(&identity)?)
            .build()
    }
}

/// The gateway's own certificate authority and the TLS setup made with it.
pub struct Authority {
    issuer: Issuer<'static, KeyPair>,
    ca_pem: String,
    acceptor: TlsAcceptor,
}

impl Authority {
    /// A fresh authority, and a server certificate of it for `names` (host
    /// names or IP addresses).
    pub fn new(names: &[String]) -> Result<Self, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.distinguished_name.push(DnType::CommonName, "flotilla model gateway authority");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let ca_key = KeyPair::generate()?;
        let ca_cert = params.self_signed(&ca_key)?;
        let issuer = Issuer::new(params, ca_key);

        let mut server = CertificateParams::new(names.to_vec())?;
        server.distinguished_name.push(DnType::CommonName, "flotilla model gateway");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_key = KeyPair::generate()?;
        let server_cert = server.signed_by(&server_key, &issuer)?;

        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_cert.der().clone()).map_err(|e| TlsError::Config(e.to_string()))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .build()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der()));
        let chain: Vec<CertificateDer<'static>> = vec![server_cert.der().clone(), ca_cert.der().clone()];
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)
            .map_err(|e| TlsError::Config(e.to_string()))?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { issuer, ca_pem: ca_cert.pem(), acceptor: TlsAcceptor::from(Arc::new(config)) })
    }

    /// The TLS setup that admits clients of this authority alone.
    pub fn acceptor(&self) -> TlsAcceptor {
        self.acceptor.clone()
    }

    /// A client certificate for one token (named `label`), and its
    /// fingerprint.
    pub fn issue(&self, label: &str) -> Result<(ClientCredentials, Fingerprint), TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, label);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        let fingerprint = Fingerprint::of(cert.der());
        let credentials =
            ClientCredentials { ca_pem: self.ca_pem.clone(), cert_pem: cert.pem(), key_pem: Secret::new(key.serialize_pem()) };
        Ok((credentials, fingerprint))
    }
}

/// The names the server certificate is made for: the loopback names, the
/// address the listener is bound to (unless it is a wildcard) and the host
/// of the URL sandboxes call.
pub fn server_names(bound: IpAddr, public_url: Option<&str>) -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if !bound.is_unspecified() {
        names.push(bound.to_string());
    }
    if let Some(host) = public_url.and_then(url_host) {
        names.push(host);
    }
    names.sort();
    names.dedup();
    names
}

/// The host of `scheme://host[:port][/…]`, without brackets.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split_once(']')?.0,
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    (!host.is_empty()).then(|| host.to_owned())
}

/// Serves HTTP/1.1 over TLS on `listener` until `stop`: each connection
/// that completes the handshake (`acceptor`, from [`Authority::acceptor`])
/// with a client certificate of the authority is served by the router `app`
/// makes for that certificate's fingerprint.
pub async fn serve(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    app: impl Fn(Fingerprint) -> axum::Router + Send + Sync + 'static,
    stop: CancellationToken,
) {
    let app = Arc::new(app);
    loop {
        let accepted = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(error) => {
                warn!(%error, "the model gateway cannot accept a connection");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        let (acceptor, app, stop) = (acceptor.clone(), Arc::clone(&app), stop.clone());
        tokio::spawn(async move {
            let tls = match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                Ok(Ok(tls)) => tls,
                Ok(Err(error)) => return debug!(%error, "a TLS handshake with the model gateway failed"),
                Err(_) => return debug!("a TLS handshake with the model gateway timed out"),
            };
            // The verifier admits no connection without a certificate.
            let Some(client) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()).map(|c| Fingerprint::of(c)) else {
                return;
            };
            let service = TowerToHyperService::new(app(client));
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(tls), service);
            tokio::select! {
                served = connection => if let Err(error) = served { debug!(%error, "a model gateway connection ended") },
                () = stop.cancelled() => {}
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_cover_loopback_the_bound_address_and_the_public_host() {
        let names = server_names("10.1.2.3".parse().expect("ip"), Some("https://gw.example.com:4780/"));
        for name in ["localhost", "127.0.0.1", "::1", "10.1.2.3", "gw.example.com"] {
            assert!(names.iter().any(|n| n == name), "{name} in {names:?}");
        }
        let wildcard = server_names("0.0.0.0".parse().expect("ip"), Some("https://[2001:db8::1]:443"));
        assert!(!wildcard.iter().any(|n| n == "0.0.0.0"));
        assert!(wildcard.iter().any(|n| n == "2001:db8::1"));
        assert_eq!(url_host("https://user:pw@host.test"), Some("host.test".into()));
        assert_eq!(url_host("not a url"), None);
    }

    #[test]
    fn each_client_certificate_is_its_own() {
        let authority = Authority::new(&server_names("127.0.0.1".parse().expect("ip"), None)).expect("authority");
        let (first, first_print) = authority.issue("one").expect("issued");
        let (second, second_print) = authority.issue("two").expect("issued");
        assert_ne!(first_print, second_print);
        assert_ne!(first.cert_pem, second.cert_pem);
        assert_eq!(first.ca_pem, second.ca_pem);
        assert!(first.key_pem.expose().contains("PRIVATE KEY"));
        assert!(!format!("{first:?}").contains("PRIVATE"), "a key never prints");
    }
}
