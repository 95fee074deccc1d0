//! The sandbox host's TLS as the deployment makes it: `deploy/sandboxd-certs.sh`
//! (what compose's one-shot runs, and the Kubernetes Secrets are made with)
//! makes a private authority and a pair a real host serves, which a client
//! trusting that authority verifies and any other client refuses.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flotilla_config::TlsFiles;
use flotilla_sandboxd::{Sandboxd, TestOptions};

use crate::deploy::deploy_dir;

/// A directory of this test's own, removed when dropped.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new(what: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("flotilla-{what}-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("a temp dir");
        Self(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// Runs the shipped certificate script with `args`.
fn certs_script(args: &[&str]) -> Output {
    Command::new("sh").arg(deploy_dir().join("sandboxd-certs.sh")).args(args).output().expect("sh runs")
}

/// A private authority and a host pair for `names`, made by the shipped
/// script in `dir` (`dir/tls`, `dir/ca`): the pair and the authority's PEM.
pub(crate) fn private_authority(dir: &Path, names: &[&str]) -> (TlsFiles, PathBuf) {
    let (tls, ca) = (dir.join("tls"), dir.join("ca"));
    let mut args = vec![tls.to_str().expect("a UTF-8 path"), ca.to_str().expect("a UTF-8 path")];
    args.extend(names);
    let out = certs_script(&args);
    assert!(out.status.success(), "sandboxd-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
    (TlsFiles { cert: tls.join("tls.crt"), key: tls.join("tls.key") }, ca.join("ca.crt"))
}

/// A client that trusts only the authority in `ca`.
fn client_of(ca: &Path) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("the authority's certificate");
    let authority = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
    reqwest::Client::builder().tls_certs_only([authority]).build().expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_script_makes_a_pair_the_host_serves_and_only_its_authoritys_clients_trust() {
    let dir = TempDir::new("sandboxd-certs");
    let (files, ca) = private_authority(&dir.0, &["DNS:localhost", "IP:127.0.0.1"]);
    let key_mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&files.key).expect("the key").permissions());
    assert_eq!(key_mode & 0o077, 0, "the key is its owner's alone: {key_mode:o}");
    let host = Sandboxd::start_with(TestOptions { tls: Some(files.clone()), ..TestOptions::default() }).await;

    let health = client_of(&ca).get(format!("{}/health", host.api_url())).send().await.expect("verified over TLS");
    assert_eq!(health.status(), 204);
    let edge = client_of(&ca)
        .get(format!("{}/", host.sandbox_url()))
        .header("E2b-Sandbox-Id", "nosuchsandbox")
        .header("E2b-Sandbox-Port", "6080")
        .send()
        .await
        .expect("the edge, verified over TLS");
    assert_eq!(edge.status(), 502, "the edge answers with the same pair");

    // Another run makes another authority, which does not vouch for this host.
    let other = TempDir::new("sandboxd-other-ca");
    let (_, other_ca) = private_authority(&other.0, &["DNS:localhost", "IP:127.0.0.1"]);
    let refused = client_of(&other_ca).get(format!("{}/health", host.api_url())).send().await;
    assert!(refused.is_err(), "a client of another authority refuses the host: {refused:?}");

    // A second run over the same directories keeps what is there.
    let before = std::fs::read(&files.cert).expect("the certificate");
    let (tls, ca_dir) = (dir.0.join("tls").display().to_string(), dir.0.join("ca").display().to_string());
    let again = certs_script(&[tls.as_str(), ca_dir.as_str(), "DNS:x"]);
    assert!(again.status.success());
    assert_eq!(std::fs::read(&files.cert).expect("the certificate"), before, "nothing is made again");
    let bad = certs_script(&["tls", "ca", "sandboxd"]);
    assert_eq!(bad.status.code(), Some(2), "a name without DNS: or IP: is refused");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("neither DNS:<name> nor IP:<address>"));
    host.shutdown().await;
}
