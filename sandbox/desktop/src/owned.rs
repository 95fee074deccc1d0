//! A provider together with, when it owns one, its root directory: the
//! directory is removed once every desktop is gone. For hosts and tests that
//! make a root of their own.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use super::{LocalConfig, LocalProvider};

/// See the module docs.
pub struct Desktops {
    provider: Option<LocalProvider>,
    root: PathBuf,
    remove_root: bool,
}

impl Desktops {
    /// `provider` over `root`, which is removed with it when `remove_root`.
    pub fn new(provider: LocalProvider, root: PathBuf, remove_root: bool) -> Self {
        Self { provider: Some(provider), root, remove_root }
    }

    /// A provider of `config` over a fresh directory in the temp dir, removed with it.
    pub fn in_fresh_root(config: LocalConfig) -> Self {
        let root = std::env::temp_dir().join(format!("flotilla-desktops-{:016x}", rand::random::<u64>()));
        Self::new(LocalProvider::new(LocalConfig { root: root.clone(), ..config }), root, true)
    }

    pub fn provider(&self) -> &LocalProvider {
        self.provider.as_ref().expect("the desktops are not closed yet")
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Drops the provider now (killing every desktop), keeping the root's fate for later.
    pub fn close(&mut self) {
        drop(self.provider.take());
    }
}

impl Deref for Desktops {
    type Target = LocalProvider;

    fn deref(&self) -> &LocalProvider {
        self.provider()
    }
}

impl Drop for Desktops {
    fn drop(&mut self) {
        self.close();
        if self.remove_root {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
