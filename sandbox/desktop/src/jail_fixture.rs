//! What the jail's tests share: a provider under a root of its own, and
//! (from `flotilla_sandbox::jail_suite`) a script typed into a sandbox's own
//! terminal as an agent types it.

use std::net::Ipv4Addr;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use super::{Isolation, LocalConfig, LocalProvider, Network};

/// A provider with its own root, removed after the test.
pub(super) struct Fixture {
    provider: Option<LocalProvider>,
    pub root: PathBuf,
}

impl Fixture {
    pub fn new(network: Network, exceptions: Vec<Ipv4Addr>) -> Self {
        let root = std::env::temp_dir().join(format!("flotilla-jail-test-{:016x}", rand::random::<u64>()));
        let config = LocalConfig {
            root: root.clone(),
            isolation: Isolation::Full,
            network,
            egress_exceptions: exceptions,
            ..LocalConfig::default()
        };
        Self::with_config(config, root)
    }

    /// A provider of `config`, whose sandboxes live under `root`.
    pub fn with_config(config: LocalConfig, root: PathBuf) -> Self {
        Self { provider: Some(LocalProvider::new(config)), root }
    }

    pub fn provider(&self) -> &LocalProvider {
        self.provider.as_ref().expect("provider not dropped yet")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        drop(self.provider.take());
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

pub(super) use flotilla_sandbox::jail_suite::{typed, TRY_TCP};

/// The unprivileged user the non-root run uses: `nobody`, on every Debian.
const UNPRIVILEGED_UID: u32 = 65534;

/// The effective uid of this process (the owner of `/proc/self`).
pub(super) fn effective_uid() -> u32 {
    std::fs::metadata("/proc/self").expect("/proc is mounted").uid()
}

/// Runs the ignored test `path` (a module path from the crate root) in a
/// copy of this test binary started as `nobody` (`setpriv`, util-linux),
/// with no capability and no control group of its own to manage, and
/// asserts it ran and passed.
pub(super) async fn run_as_unprivileged(path: &str) {
    let name = path.split_once("::").expect("a crate path").1;
    let binary = std::env::current_exe().expect("this test binary");
    let uid = UNPRIVILEGED_UID.to_string();
    let output = tokio::process::Command::new("setpriv")
        .args(["--reuid", &uid, "--regid", &uid, "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"])
        .arg(&binary)
        .args(["--exact", name, "--ignored", "--nocapture", "--test-threads", "1"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", "/tmp")
        .env("RUST_BACKTRACE", "1")
        .kill_on_drop(true)
        .output()
        .await
        .expect("setpriv (util-linux) runs");
    let out = format!("{}\n{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{name} failed as uid {uid}:\n{out}");
    assert!(out.contains("1 passed"), "{name} did not run as uid {uid}:\n{out}");
}
