//! What the jail's tests share: a provider under a root of its own, and a
//! script typed into a sandbox's own terminal as an agent types it.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use super::{Isolation, LocalConfig, LocalProvider, Network};
use flotilla_sandbox::{suite, Sandbox, SandboxProvider};

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

/// Runs `script` by typing `bash <file>` into the sandbox's terminal and
/// returns what it printed once it printed `done`.
pub(super) async fn typed(provider: &LocalProvider, sandbox: &Sandbox, name: &str, script: &str) -> String {
    provider.write_file(&sandbox.id, name, script.as_bytes()).await.expect("script written");
    suite::type_line(provider, sandbox, &format!("bash {name} > {name}.out 2>&1; echo done >> {name}.out")).await;
    suite::eventually("the typed script to finish", || async {
        let out = provider.read_file(&sandbox.id, &format!("{name}.out")).await.ok()?;
        let text = String::from_utf8_lossy(&out).into_owned();
        text.contains("done").then_some(text)
    })
    .await
}

pub(super) const TRY_TCP: &str = r#"try() { if timeout 3 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; then echo "$1:$2 open"; else echo "$1:$2 closed"; fi; }
fetch() { timeout 5 bash -c "exec 3<>/dev/tcp/$1/$2; printf 'GET / HTTP/1.0\r\n\r\n' >&3; cat <&3" 2>/dev/null | tail -n 1; echo; }
"#;
