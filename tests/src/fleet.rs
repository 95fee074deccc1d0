//! The fleet under test: configuration for a test, the API served in process
//! on a loopback port, and workers as real child processes that can be killed,
//! stopped and resumed.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use flotilla_blobstore::BlobStore;
use flotilla_config::Config;
use flotilla_queue::queue::Queue;
use flotilla_queue::webhooks::target::Lookup;
use tokio_util::sync::CancellationToken;

use crate::redis_server::RedisUnderTest;

/// The API key every test uses, for tenant `acme`.
pub const fn api_key() -> &'static str {
    "flt_testacme00000000000000000000000000000"
}

/// The API key of tenant `globex`, for tests of tenant isolation.
pub const fn globex_key() -> &'static str {
    "flt_testglobex000000000000000000000000000"
}

/// The admin key, for `/metrics`.
pub const fn admin_key() -> &'static str {
    "flt_testadmin0000000000000000000000000000"
}

/// A key prefix no other test uses.
pub fn unique_prefix() -> String {
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("t{}-{n}-{}", std::process::id(), &ulid::Ulid::new().to_string()[18..].to_lowercase())
}

/// A config file (`flotilla.toml`) holding `contents`, in a fresh
/// directory of its own.
pub fn config_file(contents: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("flotilla-config-{}", unique_prefix()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("flotilla.toml");
    std::fs::write(&path, contents).expect("write config");
    path
}

/// The environment of a test fleet on `redis` under `prefix`, plus `extra`.
pub fn test_env(redis: &dyn RedisUnderTest, prefix: &str, extra: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut env = vec![
        ("FLOTILLA_REDIS_URL".to_owned(), redis.url()),
        ("FLOTILLA_KEY_PREFIX".to_owned(), prefix.to_owned()),
        ("FLOTILLA_API_KEYS".to_owned(), format!("{}=acme,{}=globex", api_key(), globex_key())),
        ("FLOTILLA_ADMIN_KEY".to_owned(), admin_key().to_owned()),
        ("FLOTILLA_RETRY_BASE_MS".to_owned(), "50".to_owned()),
        ("FLOTILLA_RETRY_MAX_MS".to_owned(), "500".to_owned()),
    ];
    for (k, v) in extra {
        env.retain(|(name, _)| name != k);
        env.push(((*k).to_owned(), (*v).to_owned()));
    }
    env
}

/// The configuration of a test fleet.
pub fn test_config(redis: &dyn RedisUnderTest, prefix: &str, extra: &[(&str, &str)]) -> Config {
    Config::from_env(test_env(redis, prefix, extra)).expect("test config is valid")
}

/// A fleet whose tenants' settings come from a config file: the
/// environment of its worker processes, its queue and its API in process,
/// and where the API lists the running tasks (what limit tests sample).
pub struct FileFleet {
    pub env: Vec<(String, String)>,
    pub queue: Queue,
    pub api: ApiServer,
    pub client: reqwest::Client,
    /// `GET /v1/tasks?status=running&limit=100`.
    pub running_url: String,
}

impl FileFleet {
    /// Writes `settings` (TOML) to a file named after `prefix` in `dir`,
    /// and starts the queue and the API with it (`FLOTILLA_CONFIG`) and
    /// `extra`; workers are the caller's, started from `env`.
    pub async fn start(redis: &dyn RedisUnderTest, prefix: &str, dir: &Path, settings: &str, extra: &[(&str, &str)]) -> Self {
        let file = dir.join(format!("{prefix}.toml"));
        std::fs::write(&file, settings).expect("write config");
        let file = file.to_string_lossy().into_owned();
        let mut extra = extra.to_vec();
        extra.push(("FLOTILLA_CONFIG", file.as_str()));
        let env = test_env(redis, prefix, &extra);
        let config = test_config(redis, prefix, &extra);
        let queue = Queue::connect(&config).await.expect("queue connects");
        let api = spawn_api(config).await;
        let running_url = api.url("/v1/tasks?status=running&limit=100");
        Self { env, queue, client: api.client(), api, running_url }
    }
}

/// The API, served in this process on a free loopback port.
pub struct ApiServer {
    pub base_url: String,
    shutdown: CancellationToken,
}

impl ApiServer {
    /// `GET`/`POST` helper with the test key.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::new()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// Starts the API for `config` on 127.0.0.1:0.
pub async fn spawn_api(config: Config) -> ApiServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind api");
    let base_url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = flotilla_api::run(config, listener, token).await {
            eprintln!("api stopped: {e:#}");
        }
    });
    ApiServer { base_url, shutdown }
}

/// Starts the API for `config` on 127.0.0.1:0, presigning links into `blobs`.
pub async fn spawn_api_with_blobs(config: Config, blobs: BlobStore) -> ApiServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind api");
    let base_url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    let queue = Queue::connect(&config).await.expect("api reaches redis");
    let state = flotilla_api::AppState::with_blobs(config, queue, Some(blobs), shutdown.clone());
    let token = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = flotilla_api::serve(state, listener, token).await {
            eprintln!("api stopped: {e:#}");
        }
    });
    ApiServer { base_url, shutdown }
}

/// Starts the API for `config` on 127.0.0.1:0, resolving the names of
/// webhook targets with `lookup`.
pub async fn spawn_api_with_lookup(config: Config, lookup: Arc<dyn Lookup>) -> ApiServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind api");
    let base_url = format!("http://{}", listener.local_addr().expect("addr"));
    let shutdown = CancellationToken::new();
    let queue = Queue::connect(&config).await.expect("api reaches redis");
    let state = flotilla_api::AppState::with_lookup(config, queue, None, lookup, shutdown.clone());
    let token = shutdown.clone();
    tokio::spawn(async move {
        if let Err(e) = flotilla_api::serve(state, listener, token).await {
            eprintln!("api stopped: {e:#}");
        }
    });
    ApiServer { base_url, shutdown }
}

/// A `flotilla-worker` child process.
pub struct WorkerProcess {
    pub child: Child,
    pub id: String,
}

impl WorkerProcess {
    /// Starts the worker binary with this environment.
    pub fn spawn(env: &[(String, String)], id: &str) -> Self {
        let child = Command::new(binary("flotilla-worker"))
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("RUST_LOG", std::env::var("FLOTILLA_TEST_LOG").unwrap_or_else(|_| "warn".into()))
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("FLOTILLA_WORKER_ID", id)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn flotilla-worker (built by `cargo build --bins`)");
        Self { child, id: id.to_owned() }
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status();
        assert!(status.is_ok_and(|s| s.success()), "kill -{signal} worker {}", self.id);
    }

    /// Waits for the process to exit, up to `secs`; returns whether it did.
    pub fn wait_exit(&mut self, secs: u64) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        false
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The path of one of the workspace's binaries, built beside the tests.
pub fn binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe.parent().expect("target dir");
    if dir.ends_with("deps") {
        dir = dir.parent().expect("target dir");
    }
    let path = dir.join(name);
    assert!(path.exists(), "{} is missing: run `cargo build --bins` first", path.display());
    path
}
