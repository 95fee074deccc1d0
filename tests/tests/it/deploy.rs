//! The deployment files agree with the code: every environment variable the
//! manifests and the compose file set is one the configuration reads, every
//! file parses, the KEDA triggers name the streams and group the workers
//! really read, and the workers' grace period covers their drain deadline.
//! The sandbox host's part is in `deploy_sandboxd.rs`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flotilla_config::KNOWN_VARS;
use yaml_rust2::{Yaml, YamlLoader};

pub(crate) fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every YAML document of every manifest, with the file it came from.
pub(crate) fn documents() -> Vec<(String, Yaml)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(deploy_dir().join("k8s")).expect("deploy/k8s").map(|e| e.expect("entry").path()).collect();
    files.push(deploy_dir().join("compose.yaml"));
    files.sort();
    let mut docs = Vec::new();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(file).expect("readable");
        let parsed = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        assert!(!parsed.is_empty(), "{} is empty", file.display());
        docs.extend(parsed.into_iter().map(|d| (file.display().to_string(), d)));
    }
    docs
}

pub(crate) fn kind(doc: &Yaml) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

pub(crate) fn containers(doc: &Yaml) -> Vec<&Yaml> {
    doc["spec"]["template"]["spec"]["containers"].as_vec().map(|v| v.iter().collect()).unwrap_or_default()
}

/// The environment variable names a document sets.
fn env_names(doc: &Yaml) -> Vec<String> {
    let mut names = Vec::new();
    for container in containers(doc) {
        for var in container["env"].as_vec().into_iter().flatten() {
            names.extend(var["name"].as_str().map(str::to_owned));
        }
    }
    if kind(doc) == "ConfigMap" && doc["metadata"]["name"].as_str() == Some("flotilla-config") {
        names.extend(doc["data"].as_hash().into_iter().flatten().filter_map(|(k, _)| k.as_str().map(str::to_owned)));
    }
    for (name, service) in doc["services"].as_hash().into_iter().flatten() {
        if matches!(name.as_str(), Some("api" | "worker" | "sandboxd")) {
            names.extend(
                service["environment"].as_hash().into_iter().flatten().filter_map(|(k, _)| k.as_str().map(str::to_owned)),
            );
        }
    }
    names
}

#[test]
fn every_variable_the_deployment_sets_is_one_the_configuration_reads() {
    let known: BTreeSet<&str> = KNOWN_VARS.iter().map(|(var, _)| *var).collect();
    let mut seen = 0;
    for (file, doc) in documents() {
        for name in env_names(&doc) {
            seen += 1;
            let standard_aws = name.starts_with("AWS_");
            // The pod's and the node's addresses, from the Downward API, for
            // `$(POD_IP)` in the listen addresses and `$(HOST_IP)` in the
            // sandbox host's URL.
            let downward = name == "POD_IP" || name == "HOST_IP";
            assert!(
                known.contains(name.as_str()) || standard_aws || downward,
                "{file} sets {name}, which the configuration does not read"
            );
        }
    }
    assert!(seen >= 10, "the manifests set the fleet's variables ({seen} seen)");
}

#[test]
fn keda_scales_on_the_fleet_backlog_the_api_reports() {
    let docs = documents();
    let scaled = docs.iter().find(|(_, d)| kind(d) == "ScaledObject").expect("a KEDA ScaledObject");
    let triggers = scaled.1["spec"]["triggers"].as_vec().expect("triggers");
    assert_eq!(triggers.len(), 1);
    assert_eq!(triggers[0]["type"].as_str(), Some("prometheus"));
    let query = triggers[0]["metadata"]["query"].as_str().expect("query");
    assert!(query.contains("flotilla_queue_depth"), "scales on the metric the API serves: {query}");
    let fleet = flotilla_queue::queue::FleetStats { queued: 3, ..Default::default() };
    assert!(flotilla_api::metrics::render(&fleet).contains("\nflotilla_queue_depth 3\n"), "the API serves it");
    assert_eq!(scaled.1["spec"]["scaleTargetRef"]["name"].as_str(), Some("flotilla-worker"));
}

#[test]
fn the_workers_grace_period_outlasts_their_drain_deadline() {
    let docs = documents();
    let worker = docs
        .iter()
        .find(|(_, d)| kind(d) == "Deployment" && d["metadata"]["name"].as_str() == Some("flotilla-worker"))
        .expect("worker Deployment");
    let grace = worker.1["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().expect("grace period");
    let drain: i64 = containers(&worker.1)[0]["env"]
        .as_vec()
        .expect("env")
        .iter()
        .find(|v| v["name"].as_str() == Some("FLOTILLA_DRAIN_DEADLINE_S"))
        .and_then(|v| v["value"].as_str())
        .and_then(|v| v.parse().ok())
        .expect("drain deadline set");
    assert!(grace > drain, "grace {grace}s must exceed the drain deadline {drain}s");
}

#[test]
fn the_api_and_the_workers_have_probes_on_their_health_endpoints() {
    let docs = documents();
    for name in ["flotilla-api", "flotilla-worker"] {
        let deployment = docs
            .iter()
            .find(|(_, d)| kind(d) == "Deployment" && d["metadata"]["name"].as_str() == Some(name))
            .expect("Deployment");
        let container = containers(&deployment.1)[0];
        assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"), "{name}");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"), "{name}");
    }
}

#[test]
fn redis_keeps_accepted_tasks() {
    let conf = std::fs::read_to_string(deploy_dir().join("redis.conf")).expect("deploy/redis.conf");
    for setting in ["appendonly yes", "maxmemory-policy noeviction"] {
        assert!(conf.lines().any(|l| l.trim() == setting), "deploy/redis.conf lacks {setting:?}");
    }
    let docs = documents();
    let k8s =
        docs.iter().find(|(_, d)| d["metadata"]["name"].as_str() == Some("flotilla-redis-config")).expect("redis ConfigMap");
    let text = k8s.1["data"]["redis.conf"].as_str().expect("redis.conf");
    assert!(text.contains("appendonly yes") && text.contains("maxmemory-policy noeviction"));
}

/// A redis-server started with the shipped ACL file (its password hashes
/// filled in), killed when dropped.
struct AclRedis {
    port: u16,
    child: std::process::Child,
    dir: PathBuf,
}

impl AclRedis {
    fn start(api_password: &str, worker_password: &str) -> Self {
        use sha2::Digest;
        let hex = |p: &str| sha2::Sha256::digest(p.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>();
        let acl = std::fs::read_to_string(deploy_dir().join("redis-users.acl")).expect("deploy/redis-users.acl");
        let acl = acl.replace("API_PASSWORD_SHA256", &hex(api_password)).replace("WORKER_PASSWORD_SHA256", &hex(worker_password));
        let port = flotilla_tests::redis_server::free_port();
        let dir = std::env::temp_dir().join(format!("flotilla-acl-{port}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("users.acl"), acl).expect("acl file");
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&dir)
            .arg("--aclfile")
            .arg(dir.join("users.acl"))
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "redis-server with the ACL file did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Self { port, child, dir }
    }

    fn url(&self, user: &str, password: &str) -> String {
        format!("redis://{user}:{password}@127.0.0.1:{}", self.port)
    }
}

impl Drop for AclRedis {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Finding "Deployment defaults": Redis ran without a password or ACL. The
/// shipped ACL file turns the default user off and gives the API and the
/// workers users of their own, limited to the fleet's keys and to data
/// commands; the fleet runs a task through them, and neither an
/// unauthenticated client nor an admin command gets through.
#[tokio::test(flavor = "multi_thread")]
async fn the_fleet_runs_on_the_shipped_redis_acl_users() {
    use flotilla_tests::{api_key, spawn_api, ApiClient, WorkerProcess};
    let redis = AclRedis::start("api-password-for-test", "worker-password-for-test");
    let base = |url: String| {
        vec![
            ("FLOTILLA_REDIS_URL".to_owned(), url),
            ("FLOTILLA_KEY_PREFIX".to_owned(), "flotilla".to_owned()),
            ("FLOTILLA_API_KEYS".to_owned(), format!("{}=acme", api_key())),
        ]
    };
    let api_env = base(redis.url("flotilla-api", "api-password-for-test"));
    let api = spawn_api(flotilla_config::Config::from_env(api_env).expect("api config")).await;
    let mut worker = WorkerProcess::spawn(&base(redis.url("flotilla-worker", "worker-password-for-test")), "acl-worker");

    let client = ApiClient::new(&api, api_key());
    let spec = serde_json::json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 10}]});
    let (status, body) = client.post("/v1/tasks", &spec).await;
    assert_eq!(status, 202, "the API submits through its user: {body}");
    let id = body["id"].as_str().expect("id").to_owned();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, task) = client.get(&format!("/v1/tasks/{id}")).await;
        if task["status"] == "succeeded" {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the worker runs the task through its user: {task}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    worker.child.kill().ok();

    let anonymous = redis::Client::open(format!("redis://127.0.0.1:{}", redis.port)).expect("client");
    let mut conn = anonymous.get_multiplexed_async_connection().await.expect("connection");
    let refused: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut conn).await;
    assert!(refused.is_err(), "the default user is off");
    let api_user = redis::Client::open(redis.url("flotilla-api", "api-password-for-test")).expect("client");
    let mut conn = api_user.get_multiplexed_async_connection().await.expect("connection");
    for command in
        [redis::cmd("FLUSHALL"), redis::cmd("CONFIG").arg("GET").arg("*").to_owned(), redis::cmd("KEYS").arg("*").to_owned()]
    {
        let refused: redis::RedisResult<redis::Value> = command.query_async(&mut conn).await;
        assert!(refused.is_err(), "{command:?} is refused");
    }
    let other: redis::RedisResult<redis::Value> = redis::cmd("SET").arg("elsewhere").arg(1).query_async(&mut conn).await;
    assert!(other.is_err(), "keys outside the fleet's prefix are refused");
}

/// Whether an environment variable carries a secret. Those that name a
/// TLS file carry a path: the file is mounted from a Secret
/// (`deploy_sandboxd.rs` checks that).
pub(crate) fn is_secret(name: &str) -> bool {
    name != "FLOTILLA_KEY_PREFIX"
        && !name.ends_with("_KEY_ID")
        && !name.ends_with("_TLS_KEY")
        && (name.contains("KEY") || name.contains("SECRET") || name.contains("PASSWORD") || name == "FLOTILLA_REDIS_URL")
}

/// Finding "Deployment defaults": compose shipped a default API key and the
/// manifests could carry secrets in plain values. Every secret a manifest
/// sets comes from a Secret, no ConfigMap holds one, and compose has no
/// default for any (`${VAR:?…}` makes `up` stop until it is set).
#[test]
fn secrets_come_from_secrets_and_have_no_defaults() {
    let mut checked = 0;
    for (file, doc) in documents() {
        for container in containers(&doc) {
            for var in container["env"].as_vec().into_iter().flatten() {
                let name = var["name"].as_str().unwrap_or("");
                if is_secret(name) {
                    checked += 1;
                    assert!(var["value"].is_badvalue(), "{file}: {name} has a plain value");
                    assert!(var["valueFrom"]["secretKeyRef"]["name"].as_str().is_some(), "{file}: {name} is not from a Secret");
                }
            }
        }
        if kind(&doc) == "ConfigMap" {
            for (key, _) in doc["data"].as_hash().into_iter().flatten() {
                let key = key.as_str().unwrap_or("");
                assert!(!is_secret(key), "{file}: the ConfigMap holds {key}");
            }
        }
        for (service, spec) in doc["services"].as_hash().into_iter().flatten() {
            for (name, value) in spec["environment"].as_hash().into_iter().flatten() {
                let (name, value) = (name.as_str().unwrap_or(""), value.as_str().unwrap_or(""));
                if is_secret(name) || name.contains("PASSWORD") {
                    checked += 1;
                    assert!(value.contains(":?"), "{file}: {service:?} gives {name} a default: {value}");
                }
            }
        }
    }
    assert!(checked >= 8, "the secrets were found ({checked})");
}

/// Finding "Deployment defaults": Redis took plaintext connections from
/// anyone. In Kubernetes it listens only with TLS, knows only the ACL
/// users, and both ship as Secrets; the users file turns `default` off.
#[test]
fn redis_takes_only_tls_and_acl_users() {
    let docs = documents();
    let k8s =
        docs.iter().find(|(_, d)| d["metadata"]["name"].as_str() == Some("flotilla-redis-config")).expect("redis ConfigMap");
    let conf = k8s.1["data"]["redis.conf"].as_str().expect("redis.conf");
    for line in ["port 0", "tls-port 6379", "aclfile /etc/redis-acl/users.acl"] {
        assert!(conf.lines().any(|l| l.trim() == line), "redis.conf lacks {line:?}");
    }
    let acl = std::fs::read_to_string(deploy_dir().join("redis-users.acl")).expect("users file");
    assert!(acl.lines().any(|l| l.trim() == "user default off"), "{acl}");
    for user in ["flotilla-api", "flotilla-worker"] {
        assert!(acl.lines().any(|l| l.starts_with(&format!("user {user} on #"))), "{user} has a hashed password: {acl}");
    }
    let config = std::fs::read_to_string(deploy_dir().join("k8s/config.yaml")).expect("config.yaml");
    assert!(
        config.contains("rediss://flotilla-api:") && config.contains("rediss://flotilla-worker:"),
        "the URLs use TLS and a user"
    );
}

/// Finding "Deployment defaults": there was no NetworkPolicy. Ingress is
/// denied by default; Redis admits only the API and the workers; the
/// workers (health, metrics, desktop view ports) admit only the API, and
/// their metrics port the monitoring namespace.
#[test]
fn only_the_api_reaches_the_workers() {
    let docs = documents();
    let policy = |name: &str| {
        docs.iter()
            .find(|(_, d)| kind(d) == "NetworkPolicy" && d["metadata"]["name"].as_str() == Some(name))
            .map(|(_, d)| d.clone())
    };
    let deny = policy("flotilla-default-deny").expect("a default-deny policy");
    assert!(deny["spec"]["podSelector"].as_hash().is_some_and(|h| h.is_empty()), "it selects every pod");
    assert!(deny["spec"]["ingress"].is_badvalue(), "and lets nothing in");
    let apps = |rule: &Yaml| -> Vec<String> {
        rule["from"]
            .as_vec()
            .into_iter()
            .flatten()
            .filter_map(|f| f["podSelector"]["matchLabels"]["app"].as_str().map(str::to_owned))
            .collect()
    };
    let redis = policy("flotilla-redis-ingress").expect("redis policy");
    let rules = redis["spec"]["ingress"].as_vec().expect("rules");
    assert_eq!(rules.len(), 1);
    assert_eq!(apps(&rules[0]), ["flotilla-api", "flotilla-worker"]);
    let worker = policy("flotilla-worker-ingress").expect("worker policy");
    let rules = worker["spec"]["ingress"].as_vec().expect("rules");
    assert_eq!(apps(&rules[0]), ["flotilla-api"], "every worker port: the API only");
    for rule in &rules[1..] {
        assert!(apps(rule).is_empty(), "no other pod");
        let ports: Vec<i64> = rule["ports"].as_vec().into_iter().flatten().filter_map(|p| p["port"].as_i64()).collect();
        assert_eq!(ports, [9090], "others reach only the metrics port");
    }
}

/// Runs `openssl` with `args` in `dir`.
fn openssl(dir: &Path, args: &[&str]) {
    let status = std::process::Command::new("openssl").args(args).current_dir(dir).stderr(std::process::Stdio::null()).status();
    assert!(status.is_ok_and(|s| s.success()), "openssl {args:?}");
}

/// Finding "Deployment defaults": `rediss://` in the Kubernetes example must
/// work. A worker reaches a redis-server's TLS port over `rediss://`,
/// verifying it against the CA named by `SSL_CERT_FILE`, and runs a task; a
/// worker that does not trust that CA never connects.
#[tokio::test(flavor = "multi_thread")]
async fn a_worker_reaches_redis_over_rediss_and_verifies_it() {
    use flotilla_tests::WorkerProcess;
    let port = flotilla_tests::redis_server::free_port();
    // The test itself submits over a plaintext port (it cannot trust a CA
    // by environment); the workers know only the TLS port.
    let plain = flotilla_tests::redis_server::free_port();
    let dir = std::env::temp_dir().join(format!("flotilla-tls-{port}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    openssl(
        &dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "1",
            "-subj",
            "/CN=test-ca",
        ],
    );
    openssl(&dir, &["req", "-newkey", "rsa:2048", "-nodes", "-keyout", "tls.key", "-out", "tls.csr", "-subj", "/CN=localhost"]);
    std::fs::write(dir.join("ext.cnf"), "subjectAltName=DNS:localhost\n").expect("ext");
    openssl(
        &dir,
        &[
            "x509",
            "-req",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "tls.crt",
            "-days",
            "1",
            "-extfile",
            "ext.cnf",
        ],
    );
    let mut server = std::process::Command::new("redis-server")
        .args([
            "--port",
            &plain.to_string(),
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args([
            "--tls-cert-file",
            "tls.crt",
            "--tls-key-file",
            "tls.key",
            "--tls-ca-cert-file",
            "ca.crt",
            "--tls-auth-clients",
            "no",
        ])
        .current_dir(&dir)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(std::time::Instant::now() < deadline, "TLS redis-server did not start");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }

    let url = format!("rediss://localhost:{port}");
    let env = |trust: bool| {
        let mut env = vec![("FLOTILLA_REDIS_URL".to_owned(), url.clone()), ("FLOTILLA_KEY_PREFIX".to_owned(), "tls".to_owned())];
        if trust {
            env.push(("SSL_CERT_FILE".to_owned(), dir.join("ca.crt").display().to_string()));
        }
        env
    };
    let plain_url = format!("redis://127.0.0.1:{plain}");
    let config = flotilla_config::Config::from_env([("FLOTILLA_REDIS_URL", plain_url), ("FLOTILLA_KEY_PREFIX", "tls".into())])
        .expect("config");
    let queue = flotilla_queue::queue::Queue::connect(&config).await.expect("the test reaches redis");
    let id = queue
        .submitter()
        .submit(&flotilla_tests::tasks::tenant(), flotilla_tests::tasks::wait_spec(10))
        .await
        .expect("submit")
        .id;
    let mut untrusting = WorkerProcess::spawn(&env(false), "untrusting");
    // The sleep is what is tested: in 3 s of trying, the worker that does
    // not trust the CA never reaches the task.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let task = flotilla_tests::tasks::record(&queue, &id).await;
    assert_eq!(
        task.status,
        flotilla_types::task::TaskStatus::Queued,
        "a worker that does not trust the server's CA never connects"
    );
    untrusting.child.kill().ok();
    let mut worker = WorkerProcess::spawn(&env(true), "trusting");
    let ended =
        flotilla_tests::tasks::wait_all_ended(&queue, std::slice::from_ref(&id), std::time::Duration::from_secs(30)).await;
    assert_eq!(ended[0].status, flotilla_types::task::TaskStatus::Succeeded, "the worker ran the task over rediss://");
    worker.child.kill().ok();
    server.kill().ok();
    server.wait().ok();
    std::fs::remove_dir_all(dir).ok();
}

/// `(major, minor, patch)` of a version such as `1.94` or `1.94.1`; a missing
/// patch is `missing_patch` (0 for a requirement, the newest for an image tag,
/// which follows the newest patch release).
fn version_triple(version: &str, missing_patch: u32) -> Option<(u32, u32, u32)> {
    let mut parts = version.split('.');
    let (major, minor) = (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?);
    let patch = match parts.next() {
        Some(patch) => patch.parse().ok()?,
        None => missing_patch,
    };
    Some((major, minor, patch))
}

/// The workspace's `rust-version`, read from the root manifest.
fn workspace_rust_version() -> String {
    let text = std::fs::read_to_string(deploy_dir().join("../Cargo.toml")).expect("root manifest");
    let line = text.lines().find(|l| l.trim_start().starts_with("rust-version")).expect("rust-version in Cargo.toml");
    line.split('"').nth(1).expect("quoted rust-version").to_owned()
}

/// The Rust versions of the Dockerfile's `FROM rust:<version>…` stages.
fn dockerfile_rust_versions() -> Vec<String> {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).expect("deploy/Dockerfile");
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("FROM rust:"))
        .map(|image| image.split(|c: char| !(c.is_ascii_digit() || c == '.')).next().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn the_images_toolchain_satisfies_the_workspaces_rust_version() {
    let required = workspace_rust_version();
    let needed = version_triple(&required, 0).unwrap_or_else(|| panic!("rust-version {required:?} is not a version"));
    let toolchains = dockerfile_rust_versions();
    assert!(!toolchains.is_empty(), "the Dockerfile builds from no `rust:<version>` image");
    for toolchain in toolchains {
        let have = version_triple(&toolchain, u32::MAX)
            .unwrap_or_else(|| panic!("the Dockerfile's `rust:{toolchain}` names no version"));
        assert!(have >= needed, "the Dockerfile builds with Rust {toolchain}, the workspace needs {required}");
    }
}

#[test]
fn a_version_compares_by_its_patch_too() {
    assert!(version_triple("1.94.1", u32::MAX) >= version_triple("1.94.1", 0));
    assert!(version_triple("1.94", u32::MAX) >= version_triple("1.94.1", 0), "rust:1.94 follows the newest 1.94 patch");
    assert!(version_triple("1.94.0", u32::MAX) < version_triple("1.94.1", 0));
    assert!(version_triple("1.93", u32::MAX) < version_triple("1.94", 0));
}

/// What each image ships: its packages, whose binaries are all it builds,
/// and the crate whose test features must stay off in them: the API and
/// worker image (the worker's in-memory sandbox) and the sandbox host's
/// (the sandbox contract's fakes).
pub(crate) const IMAGES: [(&[&str], &str); 2] = [
    (&["flotilla-api", "flotilla-worker", "flotilla-cli"], "flotilla-worker"),
    (&["flotilla-sandboxd", "flotilla-spawner"], "flotilla-sandbox"),
];

/// The `RUN` instructions of the Dockerfile that call `cargo <verb>`, with
/// continuation lines joined.
fn cargo_runs(verb: &str) -> Vec<String> {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).expect("deploy/Dockerfile");
    let joined = text.replace("\\\n", " ");
    joined.lines().filter(|l| l.trim_start().starts_with("RUN cargo ") && l.contains(verb)).map(str::to_owned).collect()
}

/// The features of `inverted` that building `packages` together turns on.
fn features_built(packages: &[&str], inverted: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut tree = std::process::Command::new(cargo);
    // An image builds no tests: dev-dependencies (and the features they
    // turn on for tests alone, resolver 2) are not in it.
    tree.args(["tree", "--offline", "-e", "features,no-dev", "-i", inverted]).current_dir(deploy_dir().join(".."));
    for package in packages {
        tree.args(["-p", package]);
    }
    let out = tree.output().expect("cargo tree runs");
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().next().is_some_and(|l| l.starts_with(inverted)), "{packages:?} build {inverted}: {text}");
    text.lines().filter_map(|l| Some(l.split("feature \"").nth(1)?.split('"').next()?.to_owned())).collect()
}

/// Finding "Test fakes in the production worker": each image builds only its
/// shipped packages, so the test crate's features (the in-memory sandbox, the
/// E2B stand-in, the sandbox contract's fakes) are never resolved into what
/// it ships; the same selection, asked of cargo, turns on no feature of the
/// crate that has them but its default.
#[test]
fn the_image_builds_only_the_shipped_packages_without_test_features() {
    for verb in ["cargo build", "cargo chef cook"] {
        let runs = cargo_runs(verb);
        assert_eq!(runs.len(), IMAGES.len(), "one `{verb}` per image in the Dockerfile: {runs:?}");
        for (run, (shipped, _)) in runs.iter().zip(IMAGES) {
            let words: Vec<&str> = run.split_whitespace().collect();
            let packages: Vec<&str> = words.windows(2).filter(|w| w[0] == "-p" || w[0] == "--package").map(|w| w[1]).collect();
            assert_eq!(packages, shipped, "`{verb}` selects the shipped packages: {run}");
            for flag in ["--workspace", "--all", "--features", "--all-features", "-F"] {
                assert!(!words.contains(&flag), "`{verb}` with {flag}: {run}");
            }
        }
    }
    for (shipped, inverted) in IMAGES {
        let features = features_built(shipped, inverted);
        assert!(features.iter().all(|f| f == "default"), "{shipped:?} turn on {inverted}'s features {features:?}");
    }
}

/// Finding "Deployment defaults": the worker's HTTP side (health, metrics,
/// desktop views) listened on every interface. In Kubernetes it binds the
/// pod's own address (from the Downward API), which is also the address the
/// API reaches it at; compose turns it off (the API there reaches no worker's
/// loopback). Unset, a worker serves it on a loopback port of its own.
#[test]
fn the_workers_http_binds_the_pods_address_not_every_interface() {
    let mut checked = 0;
    for (file, doc) in documents() {
        for container in containers(&doc) {
            let env = container["env"].as_vec().cloned().unwrap_or_default();
            let position = |name: &str| env.iter().position(|v| v["name"].as_str() == Some(name));
            let Some(at) = position("FLOTILLA_WORKER_HTTP_ADDR") else { continue };
            let value = env[at]["value"].as_str().unwrap_or_default();
            assert!(!value.starts_with("0.0.0.0") && !value.starts_with("[::]"), "{file}: {value} is every interface");
            assert_eq!(value, "$(POD_IP):9090", "{file}");
            let pod_ip = position("POD_IP").unwrap_or_else(|| panic!("{file} defines no POD_IP"));
            assert!(pod_ip < at, "{file}: POD_IP is defined before it is used");
            assert_eq!(env[pod_ip]["valueFrom"]["fieldRef"]["fieldPath"].as_str(), Some("status.podIP"), "{file}");
            checked += 1;
        }
        for (name, service) in doc["services"].as_hash().into_iter().flatten() {
            let addr = &service["environment"]["FLOTILLA_WORKER_HTTP_ADDR"];
            if name.as_str() == Some("worker") {
                assert_eq!(addr.as_str(), Some("off"), "{file}: the compose worker's HTTP side is off");
            } else {
                assert!(addr.is_badvalue(), "{file}: {name:?} sets FLOTILLA_WORKER_HTTP_ADDR to {addr:?}");
            }
        }
    }
    assert_eq!(checked, 1, "the worker deployment sets its HTTP address");
    let config = flotilla_config::Config::from_env([("FLOTILLA_API_KEYS", "")]).expect("defaults");
    let loopback = config.worker.http_addr.expect("by default a worker serves HTTP");
    assert!(loopback.ip().is_loopback() && loopback.port() == 0, "on a loopback port of its own: {loopback}");
}
