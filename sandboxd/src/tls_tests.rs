//! The host over TLS: both listeners answer HTTPS with the operator's
//! certificate and nothing in plain HTTP, TLS is what lets a host listen
//! beyond loopback, and a worker trusting the host's private CA drives its
//! desktops over it.

use std::path::Path;

use flotilla_config::{Config, TlsFiles};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::{check_listen_addresses, Sandboxd, StartError, TestOptions};

/// An authority's certificate (PEM), and a server certificate of it for
/// `localhost` and `127.0.0.1` written with its key into `dir`.
fn certificates(dir: &Path) -> (String, TlsFiles) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    let ca_key = KeyPair::generate().expect("key");
    let ca_cert = ca.self_signed(&ca_key).expect("authority");
    let issuer = Issuer::new(ca, ca_key);
    let server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).expect("params");
    let server_key = KeyPair::generate().expect("key");
    let server_cert = server.signed_by(&server_key, &issuer).expect("server certificate");
    let files = TlsFiles { cert: dir.join("host.pem"), key: dir.join("host-key.pem") };
    std::fs::write(&files.cert, server_cert.pem()).expect("write the certificate");
    std::fs::write(&files.key, server_key.serialize_pem()).expect("write the key");
    (ca_cert.pem(), files)
}

fn temp_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-sandboxd-tls-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

#[tokio::test]
async fn with_a_certificate_both_listeners_speak_tls_and_nothing_plain() {
    let dir = temp_dir();
    let (ca_pem, files) = certificates(&dir);
    let host = Sandboxd::start_with(TestOptions { tls: Some(files), ..TestOptions::default() }).await;
    assert!(host.api_url().starts_with("https://") && host.sandbox_url().starts_with("https://"));
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).expect("the authority")])
        .build()
        .expect("a client");

    let health = client.get(format!("{}/health", host.api_url())).send().await.expect("the control plane over TLS");
    assert_eq!(health.status(), 204);
    let created = client
        .post(format!("{}/sandboxes", host.api_url()))
        .header("X-API-Key", "e2b_00000000000000000000000000000000")
        .json(&serde_json::json!({"templateID": "desktop"}))
        .send()
        .await
        .expect("a create over TLS");
    assert_eq!(created.status(), 401, "keys are checked over TLS as ever");
    let edge = client
        .get(format!("{}/", host.sandbox_url()))
        .header("E2b-Sandbox-Id", "nosuchsandbox")
        .header("E2b-Sandbox-Port", "6080")
        .send()
        .await
        .expect("the edge over TLS");
    assert_eq!(edge.status(), 502);
    assert_eq!(edge.json::<serde_json::Value>().await.expect("json")["message"], "The sandbox was not found");

    for url in [host.api_url(), host.sandbox_url()] {
        let plain = url.replacen("https://", "http://", 1);
        let answered = reqwest::Client::new().get(format!("{plain}/health")).send().await;
        assert!(answered.is_err(), "plain HTTP gets no answer at {plain}: {answered:?}");
    }
    let stranger = reqwest::Client::builder().build().expect("a client").get(format!("{}/health", host.api_url())).send().await;
    assert!(stranger.is_err(), "a client that does not trust the certificate's authority is refused");
    host.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

/// A worker given the host's URL, a key and the private CA
/// (`FLOTILLA_SANDBOXD_URL`, `_KEY`, `_CA_CERT`) drives a desktop over TLS:
/// commands through envd, a port inside the sandbox through the edge, the
/// live stream; without the CA, or with a key the host does not take, it
/// is refused at once, naming the host and never the key.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_trusting_the_private_ca_drives_a_desktop_over_tls() {
    use flotilla_e2b::host::{sandboxd_config, HostError};
    use flotilla_sandbox::{remote::RemoteRfb, suite, SandboxProvider};

    let dir = temp_dir();
    let (ca_pem, files) = certificates(&dir);
    let ca_file = dir.join("ca.pem");
    std::fs::write(&ca_file, ca_pem).expect("write the authority");
    let host = Sandboxd::start_with(TestOptions { tls: Some(files), ..TestOptions::default() }).await;
    let worker = |ca_cert| flotilla_config::SandboxdClient {
        url: host.api_url().to_owned(),
        key: flotilla_config::Secret::new(host.test_key()),
        ca_cert,
    };
    let started = std::time::Instant::now();
    let refused = sandboxd_config(&worker(None)).await.expect_err("a host whose CA is not trusted");
    assert!(matches!(refused, HostError::Unreachable { .. }), "{refused}");
    assert!(refused.to_string().contains(host.api_url()), "{refused}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "refused at once, not asked again");

    let stranger = flotilla_config::SandboxdClient {
        key: flotilla_config::Secret::new("e2b_00000000000000000000000000000000"),
        ..worker(Some(ca_file.clone()))
    };
    let refused = sandboxd_config(&stranger).await.expect_err("a key the host does not take");
    assert!(matches!(refused, HostError::KeyRefused { .. }), "{refused}");
    assert!(!refused.to_string().contains("e2b_0000"), "no key in the error: {refused}");
    let config = sandboxd_config(&worker(Some(ca_file))).await.expect("a trusted host");
    assert_eq!(config.envd, flotilla_e2b::EnvdAddress::Routed { base_url: host.sandbox_url().to_owned() });
    let provider = flotilla_e2b::E2bProvider::new(config).expect("a provider");
    assert_eq!((provider.kind().as_str(), provider.name()), ("local", "local"));
    let sandbox = suite::create(&provider, (800, 600)).await;
    let out = provider.run(&sandbox.id, "echo over-tls", std::time::Duration::from_secs(10)).await.expect("a command");
    assert_eq!(out.stdout.trim(), "over-tls");
    let page = suite::page_through_a_port(&provider, &sandbox).await;
    assert!(page.ends_with("inside-the-sandbox\n"), "{page}");
    let stream = provider.live_stream(&sandbox.id).expect("a live stream");
    let desktop = stream.start().await.expect("the stream starts");
    let mut rfb = RemoteRfb::open(&desktop).await.expect("the stream over TLS");
    rfb.send(&[1]).await.expect("ClientInit");
    let init = rfb.read_exact(24).await.expect("ServerInit");
    assert_eq!((u16::from_be_bytes([init[0], init[1]]), u16::from_be_bytes([init[2], init[3]])), (800, 600));
    stream.stop().await;
    provider.kill(&sandbox.id).await.expect("kill");
    host.shutdown().await;
    std::fs::remove_dir_all(dir).ok();
}

#[tokio::test]
async fn a_bad_certificate_file_stops_the_host_in_one_line_naming_it() {
    let dir = temp_dir();
    let (_, files) = certificates(&dir);
    std::fs::write(&files.cert, "not a certificate").expect("write");
    let vars = [
        ("FLOTILLA_SANDBOXD_KEYS", "e2b_0123456789abcdef".to_owned()),
        ("FLOTILLA_SANDBOXD_ROOT", dir.join("root").display().to_string()),
        ("FLOTILLA_SANDBOXD_TLS_CERT", files.cert.display().to_string()),
        ("FLOTILLA_SANDBOXD_TLS_KEY", files.key.display().to_string()),
        ("FLOTILLA_SANDBOXD_ADDR", "127.0.0.1:0".to_owned()),
        ("FLOTILLA_SANDBOXD_EDGE_ADDR", "127.0.0.1:0".to_owned()),
    ];
    let config = Config::from_env(vars).expect("settings");
    let error = super::tls::acceptor(config.sandboxd.tls.as_ref().expect("tls")).err().expect("refused");
    assert!(error.starts_with("FLOTILLA_SANDBOXD_TLS_CERT:") && !error.contains('\n'), "{error}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn only_a_host_with_tls_may_listen_beyond_loopback() {
    let settings = |tls: bool| {
        let mut vars = vec![("FLOTILLA_SANDBOXD_ADDR", "0.0.0.0:49982"), ("FLOTILLA_SANDBOXD_KEYS", "e2b_0123456789abcdef")];
        if tls {
            vars.extend([("FLOTILLA_SANDBOXD_TLS_CERT", "/etc/host.pem"), ("FLOTILLA_SANDBOXD_TLS_KEY", "/etc/host-key.pem")]);
        }
        Config::from_env(vars).expect("settings").sandboxd
    };
    assert!(matches!(
        check_listen_addresses(&settings(false)),
        Err(StartError::NotLoopback { var: "FLOTILLA_SANDBOXD_ADDR", .. })
    ));
    assert!(check_listen_addresses(&settings(true)).is_ok());
    let half = Config::from_env([("FLOTILLA_SANDBOXD_TLS_CERT", "/etc/host.pem")]).expect_err("a certificate without a key");
    assert_eq!(half.var, "FLOTILLA_SANDBOXD_TLS_KEY");
}
