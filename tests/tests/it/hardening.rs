//! The security review's findings, each shown fixed end to end against a
//! real API, Redis and S3 server (and the real `flotilla` CLI). Each test's
//! doc names the finding it guards.

use std::process::Command;
use std::time::{Duration, Instant};

use flotilla_config::apikey::{KeyHasher, KeyRing, Scope};
use flotilla_tests::fleet::{admin_key, binary, globex_key, spawn_api_with_blobs};
use flotilla_tests::s3_server::S3Server;
use flotilla_tests::{api_key, spawn_api, test_config, unique_prefix, ApiClient, RedisServer};
use flotilla_types::TenantId;
use serde_json::json;

const SECRET: &str = "the test fleet's key secret, 32 bytes or more";

fn wait_task() -> serde_json::Value {
    json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]})
}

/// Finding "API keys": a read-only key (for dashboards) reads its tenant's
/// tasks but may not submit or cancel; a write key of the same tenant may
/// (one tenant holds several keys, each with its own scope), nor open a
/// `control` view.
#[tokio::test(flavor = "multi_thread")]
async fn a_read_key_reads_but_cannot_write() {
    let redis = RedisServer::start();
    let read_key = "flt_readonlyacme000000000000000000000000";
    let keys = format!("{}=acme,{}=globex,{read_key}=acme:read", api_key(), globex_key());
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[("FLOTILLA_API_KEYS", &keys)])).await;
    let (status, body) = ApiClient::new(&api, api_key()).post("/v1/tasks", &wait_task()).await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_str().expect("id").to_owned();

    let reader = ApiClient::new(&api, read_key);
    let (status, body) = reader.get(&format!("/v1/tasks/{id}")).await;
    assert_eq!(status, 200, "a read key reads its tenant's task: {body}");
    let (status, body) = reader.post("/v1/tasks", &wait_task()).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "{body}");
    let (status, _) = reader.post_empty(&format!("/v1/tasks/{id}/cancel")).await;
    assert_eq!(status, 403, "a read key cannot cancel");
    // Issue 34: a control view types into the desktop, though asked for with GET.
    let (status, body) = reader.get(&format!("/v1/tasks/{id}/view?mode=control")).await;
    assert_eq!((status, body["error"]["code"].as_str()), (403, Some("forbidden")), "a read key takes no control: {body}");
}

/// Finding "API keys": rotation needed a restart. A key written to the keys
/// file (as a digest) is accepted by the running API, and refused again once
/// removed.
#[tokio::test(flavor = "multi_thread")]
async fn keys_file_rotation_needs_no_restart() {
    let redis = RedisServer::start();
    let dir = std::env::temp_dir().join(format!("flotilla-keys-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("keys.toml");
    std::fs::write(&file, "").expect("empty keys file");
    let path = file.display().to_string();
    let env = [("FLOTILLA_API_KEY_SECRET", SECRET), ("FLOTILLA_API_KEYS_FILE", path.as_str())];
    let api = spawn_api(test_config(&redis, &unique_prefix(), &env)).await;
    let rotated = "flt_rotatedacme00000000000000000000000000";
    let client = ApiClient::new(&api, rotated);
    assert_eq!(client.get("/v1/tasks").await.0, 401, "not yet a key");

    let digest = KeyHasher::new(SECRET.as_bytes()).expect("hasher").digest(rotated);
    std::fs::write(&file, KeyRing::file_entry("rotated", &TenantId::parse("acme").expect("tenant"), Scope::Write, digest))
        .expect("write keys file");
    assert!(eventually(|| async { client.get("/v1/tasks").await.0 == 200 }).await, "the new key works without a restart");

    std::fs::write(&file, "").expect("revoke");
    assert!(eventually(|| async { client.get("/v1/tasks").await.0 == 401 }).await, "the revoked key stops working");
    std::fs::remove_dir_all(dir).ok();
}

async fn eventually<F, Fut>(check: F) -> bool
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    false
}

/// Finding "Fleet-wide figures": `/metrics` answered anyone. Now it needs the
/// admin key; no tenant's key reads the fleet's figures.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_need_the_admin_key() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    let http = reqwest::Client::new();
    let metrics = |key: Option<&'static str>| {
        let mut request = http.get(api.url("/metrics"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    assert_eq!(metrics(None).await.expect("metrics").status().as_u16(), 401, "no key");
    assert_eq!(metrics(Some(api_key())).await.expect("metrics").status().as_u16(), 401, "a tenant's key");
    let page = metrics(Some(admin_key())).await.expect("metrics");
    assert_eq!(page.status().as_u16(), 200, "the admin key");
    assert!(page.text().await.expect("text").contains("flotilla_queue_depth"));
    let (status, _) = ApiClient::new(&api, admin_key()).get("/v1/tasks").await;
    assert_eq!(status, 401, "the admin key is no tenant's key");
}

/// Finding "Terminal escapes": the CLI printed task text with ESC and other
/// control characters, so a prompt could retitle or rewrite the terminal.
#[tokio::test(flavor = "multi_thread")]
async fn the_cli_prints_no_control_characters() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    let prompt = "\u{1b}]0;owned\u{7}\u{1b}[2Jplain \u{9b}31mtext";
    let spec = json!({"prompt": prompt, "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}]});
    let (status, body) = ApiClient::new(&api, api_key()).post("/v1/tasks", &spec).await;
    assert_eq!(status, 202, "{body}");
    let output = Command::new(binary("flotilla"))
        .args(["tasks"])
        .env("FLOTILLA_API_URL", &api.base_url)
        .env("FLOTILLA_API_KEY", api_key())
        .output()
        .expect("run flotilla tasks");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", String::from_utf8_lossy(&output.stderr));
    assert!(stdout.contains("plain"), "the task is listed: {stdout}");
    let controls: Vec<char> = stdout.chars().filter(|c| c.is_control() && *c != '\n').collect();
    assert!(controls.is_empty(), "control characters reached the terminal: {controls:?}");
}

/// Finding "Inline HTML artifacts": an agent-written `.html` or `.svg` was
/// presigned to render on the bucket's origin. Now anything but a raster
/// image is signed to download as an opaque file; screenshots still show.
#[tokio::test(flavor = "multi_thread")]
async fn artifacts_other_than_images_download() {
    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let task = flotilla_types::TaskId::generate();
    let http = reqwest::Client::new();
    for (path, inline) in [("page.html", false), ("logo.svg", false), ("chart.png", true)] {
        let stored = store.put_artifact(&task, path, b"<script>alert(1)</script>".to_vec()).await.expect("put");
        let url = store.presigned_get(&stored.key, Duration::from_secs(60)).await.expect("presign").url;
        let downloads = url.contains("response-content-disposition=attachment")
            && url.contains("response-content-type=application%2Foctet-stream");
        assert_eq!(downloads, !inline, "{path}: {url}");
        assert_eq!(
            http.get(&url).send().await.expect("GET").status().as_u16(),
            200,
            "{path}: the signature covers the overrides"
        );
    }
}

/// Finding "Dashboard CSP": `img-src` allowed any host. Now only this API and
/// the configured store's origin.
#[tokio::test(flavor = "multi_thread")]
async fn the_dashboard_loads_images_only_from_the_store() {
    let redis = RedisServer::start();
    let s3 = S3Server::start();
    let prefix = unique_prefix();
    let api = spawn_api_with_blobs(test_config(&redis, &prefix, &[]), s3.store(&prefix)).await;
    let page = reqwest::get(api.url("/")).await.expect("GET /");
    let policy = page.headers().get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
    let img = policy.split(';').map(str::trim).find(|d| d.starts_with("img-src")).expect("img-src").to_owned();
    assert_eq!(img, format!("img-src 'self' data: {}", s3.endpoint().trim_end_matches('/')), "{policy}");
}

/// Finding "Deduplication as an oracle": the `dedup` flag told a tenant
/// whether anyone in the fleet had stored an identical screen. Storage stays
/// deduplicated fleet-wide, but a tenant's flag is true only for bytes that
/// tenant stored before: globex's first look at a screen acme already
/// stored says `false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_dedup_is_reported_per_tenant() {
    use flotilla_blobstore::UploaderOptions;
    use flotilla_tests::desktop::{DesktopFleet, DesktopOptions};
    use flotilla_tests::tasks::events;
    use flotilla_types::event::EventKind;
    use flotilla_types::task::TaskSpec;

    let s3 = S3Server::start();
    let store = s3.store(&unique_prefix());
    let options = DesktopOptions { blobs: Some(store), uploads: UploaderOptions::default(), ..DesktopOptions::default() };
    let fleet = DesktopFleet::start(options).await;
    let spec = json!({"prompt": "look twice", "pipeline": "scripted", "actions": [{"type": "click", "x": 5, "y": 5}, {"type": "click", "x": 5, "y": 5}]});
    let shots = |events: Vec<flotilla_types::event::Event>| -> Vec<(String, bool)> {
        events
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::Screenshot { hash, dedup, .. } => Some((hash, dedup)),
                _ => None,
            })
            .collect()
    };
    let (_, acme_events) = fleet.run_to_end(spec.clone()).await;
    let acme = shots(acme_events);
    let globex = TenantId::parse("globex").expect("tenant");
    let spec = TaskSpec::from_json(spec.to_string().as_bytes()).expect("spec");
    let id = fleet.queue.submitter().submit(&globex, spec).await.expect("submit").id;
    let ended = async || fleet.queue.reader().get(&globex, &id).await.ok().flatten().is_some_and(|t| t.status.is_terminal());
    flotilla_tests::desktop::eventually("globex's task ends", Duration::from_secs(60), ended).await;
    let theirs = shots(events(&fleet.queue, &id).await);

    assert!(!acme.is_empty() && !theirs.is_empty(), "screenshots were taken: {acme:?} {theirs:?}");
    assert!(theirs.iter().any(|(hash, _)| acme.iter().any(|(h, _)| h == hash)), "the tenants saw a common screen");
    for (i, (hash, dedup)) in theirs.iter().enumerate() {
        let seen_by_globex = theirs[..i].iter().any(|(h, _)| h == hash);
        assert_eq!(*dedup, seen_by_globex, "shot {i} of globex: {theirs:?}");
    }
    fleet.stop().await;
}

/// Finding "Fleet-wide figures": `/v1/queues` showed every tenant's load.
/// Now a tenant sees only its own lanes, load and dead-letter count: acme's
/// queued tasks are invisible to globex.
#[tokio::test(flavor = "multi_thread")]
async fn queues_show_only_the_callers_tenant() {
    let redis = RedisServer::start();
    let api = spawn_api(test_config(&redis, &unique_prefix(), &[])).await;
    let acme = ApiClient::new(&api, api_key());
    for _ in 0..3 {
        let (status, body) = acme.post("/v1/tasks", &wait_task()).await;
        assert_eq!(status, 202, "{body}");
    }
    let queued = |stats: &serde_json::Value| -> u64 {
        stats["lanes"].as_array().into_iter().flatten().filter_map(|l| l["depth"].as_u64()).sum()
    };
    let (status, mine) = acme.get("/v1/queues").await;
    assert_eq!(status, 200, "{mine}");
    let tenants: Vec<&str> = mine["tenants"].as_array().into_iter().flatten().filter_map(|t| t["tenant"].as_str()).collect();
    assert_eq!((tenants, &mine["tenants"][0]["queued"]), (vec!["acme"], &json!(3)), "{mine}");
    assert_eq!(queued(&mine), 3, "acme's lanes hold its tasks: {mine}");
    let (status, theirs) = ApiClient::new(&api, globex_key()).get("/v1/queues").await;
    assert_eq!(status, 200, "{theirs}");
    let tenants: Vec<&str> = theirs["tenants"].as_array().into_iter().flatten().filter_map(|t| t["tenant"].as_str()).collect();
    assert_eq!(tenants, ["globex"], "only the caller's own load: {theirs}");
    assert_eq!(theirs["tenants"][0]["queued"], 0, "{theirs}");
    assert_eq!(queued(&theirs), 0, "nothing of acme's lanes: {theirs}");
}

/// Finding "API keys": a request could not be traced to the key that made
/// it. Each request's log line names the key by its non-secret id
/// (`key_id`: the first 12 hex digits of its digest, or its `id` in the keys
/// file), never by the key itself.
#[tokio::test(flavor = "multi_thread")]
async fn the_log_names_the_key_by_its_id_never_the_key() {
    let redis = RedisServer::start();
    let addr = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").to_string();
    let env = flotilla_tests::fleet::test_env(
        &redis,
        &unique_prefix(),
        &[("FLOTILLA_API_ADDR", &addr), ("FLOTILLA_API_KEY_SECRET", SECRET), ("RUST_LOG", "info")],
    );
    let mut api = Command::new(binary("flotilla-api"))
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start flotilla-api");
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/v1/tasks");
    let answered =
        eventually(|| async { http.get(&url).bearer_auth(api_key()).send().await.is_ok_and(|r| r.status().as_u16() == 200) })
            .await;
    let _ = api.kill();
    let output = api.wait_with_output().expect("api output");
    let log = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(answered, "the api answered: {log}");
    let id = &KeyHasher::new(SECRET.as_bytes()).expect("hasher").digest(api_key()).to_hex()[..12];
    assert!(
        log.contains(&format!("key_id=\"{id}\"")) || log.contains(&format!("\"key_id\":\"{id}\"")),
        "the key's id is logged: {log}"
    );
    assert!(!log.contains(api_key()), "the key itself is never logged");
    assert!(!log.contains(&api_key()[4..]), "nor its secret part");
}

/// Finding "API keys": the plaintext keys stayed in the process environment
/// for the life of the process (`/proc/<pid>/environ`, and every child it
/// starts inherits them). Once the configuration is read, the API and the
/// worker keep only digests: the key variables leave the environment and
/// their values are blanked in its initial block, while the keys still work.
#[tokio::test(flavor = "multi_thread")]
async fn api_keys_leave_the_process_environment_once_read() {
    let redis = RedisServer::start();
    let addr = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").to_string();
    let env = flotilla_tests::fleet::test_env(&redis, &unique_prefix(), &[("FLOTILLA_API_ADDR", &addr)]);
    let mut api = Command::new(binary("flotilla-api"))
        .env_clear()
        .envs(env.clone())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start flotilla-api");
    let worker = flotilla_tests::WorkerProcess::spawn(&env, "scrubbed");
    let http = reqwest::Client::new();
    let url = format!("http://{addr}/v1/tasks");
    let answered =
        eventually(|| async { http.get(&url).bearer_auth(api_key()).send().await.is_ok_and(|r| r.status().as_u16() == 200) })
            .await;
    let environ = |pid: u32| std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    let shows_a_key = |pid: u32| {
        let text = String::from_utf8_lossy(&environ(pid)).into_owned();
        [api_key(), globex_key(), admin_key()].iter().any(|key| text.contains(&key[4..]))
    };
    let scrubbed = eventually(|| async { !shows_a_key(api.id()) && !shows_a_key(worker.child.id()) }).await;
    let still_answers = http.get(&url).bearer_auth(api_key()).send().await.is_ok_and(|r| r.status().as_u16() == 200);
    let api_environ = String::from_utf8_lossy(&environ(api.id())).replace('\0', "\n");
    let _ = api.kill();
    let _ = api.wait();
    assert!(answered, "the api answered with the key");
    assert!(!api_environ.is_empty() && api_environ.contains("FLOTILLA_REDIS_URL="), "the environment was read: {api_environ}");
    assert!(scrubbed, "no key is left in /proc/<pid>/environ of the api or the worker: {api_environ}");
    assert!(still_answers, "the key still works once it left the environment");
}

/// Finding "Advisories": nothing checked the dependencies for known
/// vulnerabilities. The test command runs `scripts/deny.sh`, which checks
/// them against the RustSec database, fetched or cached; when it can have
/// neither it says so in a banner (and never as a pass), here and in CI.
#[test]
fn the_test_command_checks_advisories_or_says_loudly_that_it_could_not() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let test_sh = std::fs::read_to_string(root.join("scripts/test.sh")).expect("scripts/test.sh");
    assert!(test_sh.lines().any(|l| l.trim() == "bash scripts/deny.sh"), "the test command runs deny.sh");
    let home = std::env::var("CARGO_HOME").unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default()));
    let cached = || {
        std::fs::read_dir(format!("{home}/advisory-dbs"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|db| db.path().join("crates").is_dir())
    };
    let fetched = Command::new("cargo")
        .args(["deny", "--log-level", "error", "fetch", "db"])
        .current_dir(&root)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let output = Command::new("bash").arg("scripts/deny.sh").current_dir(&root).output().expect("run deny.sh");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "deny.sh found problems:\n{stderr}");
    let banner = stderr.contains("ADVISORIES NOT CHECKED");
    assert_eq!(banner, !fetched && !cached(), "a banner exactly when no database could be had:\n{stderr}");
    if !fetched && cached() {
        assert!(stderr.contains("cached copy"), "a check against the cache says so:\n{stderr}");
    }
}
