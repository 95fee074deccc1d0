//! A real `s3s-fs` (an S3-protocol server on plain files) on a free loopback
//! port, in a temporary directory of its own, with fixed credentials and one
//! fresh bucket, stopped and removed when dropped. It can be stopped and
//! started again on the same port and data, to test riding out an outage.
//!
//! `s3s-fs` checks SigV4 signatures and presigned URLs and keeps its objects
//! as files, so what a test stored survives a restart. Install it with
//! `bash scripts/setup.sh`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_blobstore::{BlobConfig, BlobStore};
use flotilla_config::Config;

use crate::redis_server::free_port;

/// The access key every test server accepts.
pub const ACCESS_KEY: &str = "AKIAFLOTILLATEST";
/// Its secret.
pub const SECRET_KEY: &str = "flotilla-test-secret";
/// The bucket every test server starts with.
pub const BUCKET: &str = "flotilla-test";

/// A running s3s-fs owned by one test.
pub struct S3Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl S3Server {
    /// Starts a server with an empty bucket [`BUCKET`].
    pub fn start() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("flotilla-s3-{port}-{}", std::process::id()));
        std::fs::remove_dir_all(&dir).ok();
        // s3s-fs keeps each bucket as a directory under its root.
        std::fs::create_dir_all(dir.join("data").join(BUCKET)).expect("s3 data dir");
        let mut server = Self { port, dir, child: None };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let binary = s3s_fs_binary();
        let log = std::fs::File::create(self.dir.join("server.log")).expect("s3 log file");
        let child = Command::new(&binary)
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
            .arg(self.dir.join("data"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}; run `bash scripts/setup.sh` to install s3s-fs", binary.display()));
        self.child = Some(child);
        self.wait_ready();
    }

    /// Polls until the server answers HTTP on its port.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("s3s-fs exited with {status} at start: {}", self.log());
                }
            }
            if answers_http(addr) {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("s3s-fs on port {} did not answer within 10 s: {}", self.port, self.log());
    }

    /// What the server wrote to stderr, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Where the bucket's files are.
    pub fn bucket_dir(&self) -> PathBuf {
        self.dir.join("data").join(BUCKET)
    }

    /// Kills the server; its data stays.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Freezes the server (SIGSTOP): connections hang instead of failing,
    /// as with a store that stopped answering.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    fn signal(&self, signal: &str) {
        if let Some(child) = &self.child {
            Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().ok();
        }
    }

    /// The settings workers read from the environment for this store, with
    /// the test credentials.
    pub fn worker_env(&self, prefix: &str) -> Vec<(String, String)> {
        [
            ("FLOTILLA_S3_BUCKET", BUCKET.to_owned()),
            ("FLOTILLA_S3_ENDPOINT", self.endpoint()),
            ("FLOTILLA_S3_PREFIX", prefix.to_owned()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_owned()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_owned()),
            ("AWS_REGION", "us-east-1".to_owned()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect()
    }

    /// Starts the server again on the same port and data.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    /// The settings of a store on this server under `prefix`, with these
    /// credentials.
    pub fn config_with(&self, prefix: &str, bucket: &str, access_key: &str, secret: &str) -> BlobConfig {
        let fleet = Config::from_env([
            ("FLOTILLA_S3_BUCKET", bucket.to_owned()),
            ("FLOTILLA_S3_ENDPOINT", self.endpoint()),
            ("FLOTILLA_S3_PREFIX", prefix.to_owned()),
        ])
        .expect("fleet config");
        let mut config = BlobConfig::from_env(
            &fleet,
            [("AWS_ACCESS_KEY_ID", access_key), ("AWS_SECRET_ACCESS_KEY", secret), ("AWS_REGION", "us-east-1")],
        )
        .expect("blob config");
        // Tests ride out outages in the uploader, not inside one call.
        config.sdk_attempts = 1;
        config.connect_timeout = Duration::from_millis(500);
        config.attempt_timeout = Duration::from_secs(5);
        config
    }

    /// The settings of a store on this server under `prefix`.
    pub fn config(&self, prefix: &str) -> BlobConfig {
        self.config_with(prefix, BUCKET, ACCESS_KEY, SECRET_KEY)
    }

    /// A store on this server under `prefix`.
    pub fn store(&self, prefix: &str) -> BlobStore {
        BlobStore::new(self.config(prefix))
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.stop();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Whether something on `addr` answers an HTTP request with a status line.
fn answers_http(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else { return false };
    stream.set_read_timeout(Some(Duration::from_millis(500))).ok();
    if stream.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.")
}

/// `s3s-fs` on `PATH`, or where `cargo install` puts it.
pub fn s3s_fs_binary() -> PathBuf {
    let name = "s3s-fs";
    let on_path = std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|dir| dir.join(name)).find(|candidate| is_executable(candidate)));
    if let Some(found) = on_path {
        return found;
    }
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    if let Some(candidate) = cargo_home.map(|home| home.join("bin").join(name)) {
        if is_executable(&candidate) {
            return candidate;
        }
    }
    panic!(
        "s3s-fs is not installed: run `bash scripts/setup.sh` (it runs `cargo install s3s-fs@0.14.1 --locked --features binary`)"
    );
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0).unwrap_or(false)
}
