//! Fail closed: a worker whose local sandboxes cannot be isolated (here:
//! bubblewrap is not on its `PATH`) refuses to start with one line saying
//! why, and `FLOTILLA_SANDBOX_ISOLATION=none` starts it anyway with an error
//! in its log. The jail itself is shown from inside a sandbox by the worker
//! `flotilla-desktop`'s `isolation_tests`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use flotilla_tests::fleet::{binary, test_env};
use flotilla_tests::redis_server::free_port;
use flotilla_tests::{unique_prefix, RedisServer};

/// A directory of links to every program on this machine's usual `PATH`
/// except bubblewrap.
struct PathWithoutBwrap(PathBuf);

impl PathWithoutBwrap {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("flotilla-no-bwrap-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("dir");
        for bin in ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"] {
            let Ok(entries) = std::fs::read_dir(bin) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let link = dir.join(&name);
                if name != "bwrap" && !link.exists() {
                    let _ = std::os::unix::fs::symlink(entry.path(), link);
                }
            }
        }
        assert!(dir.join("unshare").exists() && !dir.join("bwrap").exists());
        Self(dir)
    }
}

impl Drop for PathWithoutBwrap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn worker(path: &Path, env: &[(String, String)]) -> std::process::Child {
    Command::new(binary("flotilla-worker"))
        .env_clear()
        .env("PATH", path)
        .env("RUST_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn flotilla-worker (built by `cargo build --bins`)")
}

#[test]
fn sandbox_provider_without_bubblewrap_refuses_to_start_and_isolation_none_starts_with_an_error() {
    let redis = RedisServer::start();
    let path = PathWithoutBwrap::new();
    let env = test_env(&redis, &unique_prefix(), &[("FLOTILLA_SANDBOX_PROVIDER", "local")]);
    let mut refused = worker(&path.0, &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = refused.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "the worker did not refuse to start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    refused.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read");
    assert!(!status.success(), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 1, "one line says why:\n{stderr}");
    assert!(lines[0].contains("cannot be isolated") && lines[0].contains("bwrap"), "{stderr}");

    let addr = format!("127.0.0.1:{}", free_port());
    let env = test_env(
        &redis,
        &unique_prefix(),
        &[("FLOTILLA_SANDBOX_PROVIDER", "local"), ("FLOTILLA_SANDBOX_ISOLATION", "none"), ("FLOTILLA_WORKER_HTTP_ADDR", &addr)],
    );
    let mut started = worker(&path.0, &env);
    let deadline = Instant::now() + Duration::from_secs(30);
    let healthy = loop {
        let answered = std::net::TcpStream::connect(&addr).is_ok();
        if answered || Instant::now() > deadline || started.try_wait().expect("wait").is_some() {
            break answered;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let alive = started.try_wait().expect("wait").is_none();
    let _ = Command::new("kill").args(["-TERM", &started.id().to_string()]).status();
    let _ = started.wait();
    let mut stderr = String::new();
    started.stderr.take().expect("stderr").read_to_string(&mut stderr).expect("read");
    assert!(healthy && alive, "the worker runs with isolation none:\n{stderr}");
    assert!(stderr.lines().any(|l| l.contains("ERROR") && l.contains("NOT isolated")), "an error is logged:\n{stderr}");
}
