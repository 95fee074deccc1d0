//! The sandbox host's TLS as the deployment makes it: `deploy/sandboxd-certs.sh`
//! (what compose's one-shot runs, and the Kubernetes Secrets are made with)
//! makes a private authority and a pair a real host serves, which a client
//! trusting that authority verifies (compose's health check among them) and
//! any other client refuses; a
//! `flotilla-worker` given the authority (`FLOTILLA_SANDBOXD_CA_CERT`) runs a
//! task on the host's desktop over it, and one without it refuses to start.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use flotilla_config::TlsFiles;
use flotilla_sandboxd::{Sandboxd, TestOptions};
use flotilla_tests::desktop::sandbox_ids;
use flotilla_tests::fleet::{binary, test_env, WorkerProcess};
use flotilla_tests::tasks::{events, queue, record, tenant, wait_all_ended};
use flotilla_tests::{test_config, unique_prefix, RedisServer};
use flotilla_types::task::{TaskSpec, TaskStatus};
use serde_json::json;

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
/// script in `dir` (`dir/tls`, `dir/ca`), the key given to `key_owner`
/// when one is named: the pair and the authority's PEM.
pub(crate) fn private_authority(dir: &Path, key_owner: Option<&str>, names: &[&str]) -> (TlsFiles, PathBuf) {
    let (tls, ca) = (dir.join("tls"), dir.join("ca"));
    let mut args = match key_owner {
        Some(owner) => vec!["--key-owner", owner],
        None => Vec::new(),
    };
    args.extend([tls.to_str().expect("a UTF-8 path"), ca.to_str().expect("a UTF-8 path")]);
    args.extend(names);
    let out = certs_script(&args);
    assert!(out.status.success(), "sandboxd-certs.sh: {}", String::from_utf8_lossy(&out.stderr));
    (TlsFiles { cert: tls.join("tls.crt"), key: tls.join("tls.key") }, ca.join("ca.crt"))
}

/// A client that trusts only the authority in `ca`.
pub(crate) fn client_of(ca: &Path) -> reqwest::Client {
    let pem = std::fs::read(ca).expect("the authority's certificate");
    let authority = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
    reqwest::Client::builder().tls_certs_only([authority]).build().expect("a client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_script_makes_a_pair_the_host_serves_and_only_its_authoritys_clients_trust() {
    let dir = TempDir::new("sandboxd-certs");
    let (files, ca) = private_authority(&dir.0, None, &["DNS:localhost", "IP:127.0.0.1"]);
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
    let (_, other_ca) = private_authority(&other.0, None, &["DNS:localhost", "IP:127.0.0.1"]);
    let refused = client_of(&other_ca).get(format!("{}/health", host.api_url())).send().await;
    assert!(refused.is_err(), "a client of another authority refuses the host: {refused:?}");

    // Compose's health check, as it runs in the host's container: healthy
    // with the one-shot's authority, not with another's.
    let port = host.api_url().rsplit(':').next().expect("a port").to_owned();
    let health_check = |authority: &Path| {
        let check = crate::deploy_sandboxd::compose()["sandboxd"]["healthcheck"]["test"].clone();
        let args: Vec<String> =
            check.as_vec().expect("a health check").iter().filter_map(|a| a.as_str()).map(str::to_owned).collect();
        let at = args.iter().position(|a| a == "--cacert").expect("verified against a file") + 1;
        let args: Vec<String> = args
            .iter()
            .enumerate()
            .map(|(i, a)| if i == at { authority.display().to_string() } else { a.replace(":49982/", &format!(":{port}/")) })
            .collect();
        assert_eq!(args.first().map(String::as_str), Some("CMD"), "{args:?}");
        Command::new(&args[1]).args(&args[2..]).stderr(Stdio::null()).status().expect("the check runs")
    };
    assert!(health_check(&ca).success(), "the host is healthy to compose");
    assert!(!health_check(&other_ca).success(), "not to a check that trusts another authority");

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

/// How long a worker that cannot verify its host may take to give up (it
/// asks again for a while, as it does a host not up yet).
const REFUSAL_WITHIN: Duration = Duration::from_secs(90);

/// Starts a worker; what it prints and how it exits, once it ends within
/// `REFUSAL_WITHIN`.
fn start_worker(env: &[(String, String)]) -> tokio::task::JoinHandle<Output> {
    let child = tokio::process::Command::new(binary("flotilla-worker"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("FLOTILLA_WORKER_ID", "untrusting")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("flotilla-worker starts");
    tokio::spawn(async move {
        tokio::time::timeout(REFUSAL_WITHIN, child.wait_with_output())
            .await
            .expect("a worker that cannot verify its host gives up")
            .expect("its output")
    })
}

/// A worker whose desktops come from a host served over TLS with a pair of
/// the shipped script's private authority, as compose and Kubernetes set
/// it: `FLOTILLA_SANDBOX_PROVIDER=local` and the host's URL and key; with
/// `FLOTILLA_SANDBOXD_CA_CERT` naming the authority it runs a task on the
/// host's desktop and records the host's URL with the sandbox; without it,
/// it never sends the key over a connection it cannot verify and stops at
/// start with one line saying why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_runs_a_desktop_task_on_a_host_it_verifies_and_refuses_one_it_cannot() {
    let dir = TempDir::new("sandboxd-worker-tls");
    let (files, ca) = private_authority(&dir.0, None, &["DNS:localhost", "IP:127.0.0.1"]);
    let host = Sandboxd::start_with(TestOptions { tls: Some(files), ..TestOptions::default() }).await;
    assert!(host.api_url().starts_with("https://"), "{}", host.api_url());
    let redis = RedisServer::start();
    let prefix = unique_prefix();
    let ca = ca.display().to_string();
    let reach = [
        ("FLOTILLA_SANDBOX_PROVIDER", "local"),
        ("FLOTILLA_SANDBOXD_URL", host.api_url()),
        ("FLOTILLA_SANDBOXD_KEY", host.test_key()),
    ];
    let trusting: Vec<(&str, &str)> = reach.iter().copied().chain([("FLOTILLA_SANDBOXD_CA_CERT", ca.as_str())]).collect();
    // The worker without the authority runs beside the one with it, on
    // another prefix, so it could take no task of this test.
    let untrusting = start_worker(&test_env(&redis, &unique_prefix(), &reach));

    let q = queue(&test_config(&redis, &prefix, &[])).await;
    let _worker = WorkerProcess::spawn(&test_env(&redis, &prefix, &trusting), "trusting");
    let spec = json!({
        "prompt": "type on the host's desktop", "pipeline": "scripted", "retry": {"max_attempts": 1},
        "actions": [{"type": "type", "text": "echo over verified tls\n"}, {"type": "wait", "ms": 200}]
    });
    let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("a valid spec");
    let id = q.submitter().submit(&tenant(), spec).await.expect("submit").id;
    let ended = wait_all_ended(&q, std::slice::from_ref(&id), Duration::from_secs(90)).await;
    let history = events(&q, &id).await;
    assert_eq!(ended[0].status, TaskStatus::Succeeded, "{history:?}");
    assert_eq!(sandbox_ids(&history).len(), 1, "one desktop: {history:?}");
    let held = record(&q, &id).await.sandbox.expect("the task records its sandbox");
    assert_eq!(held["host"].as_str(), Some(host.api_url()), "the record names the host's URL: {held}");
    assert!(host.desktop_calls() > 0, "the host's desktop took the task's actions");

    let refused = untrusting.await.expect("the untrusting worker was watched");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a worker that cannot verify its host does not start: {stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains(host.api_url()) && last.contains("certificate"),
        "one line naming the host and its certificate: {stderr}"
    );
    assert!(!stderr.contains(host.test_key()), "the key is never shown");
    host.shutdown().await;
}
