//! The API keys accepted right now: those of `FLOTILLA_API_KEYS` plus those
//! of the keys file, which is re-read while the API runs so keys can be
//! added, rotated and revoked without a restart.
//!
//! A file that cannot be read or is invalid (bad entry, a key twice, a key
//! also in the environment) is refused as a whole: the keys in force stay
//! as they were and the refusal is logged. Only digests are held; a
//! presented key is digested with the server secret and compared with every
//! known digest in constant time.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use flotilla_config::apikey::{KeyDigest, KeyHasher, KeyMatch, KeyRing, KeysFileError};
use flotilla_config::AuthConfig;
use tokio_util::sync::CancellationToken;

/// How often the keys file is looked at for changes.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// What a look at the keys file did.
#[derive(Debug)]
pub enum Reload {
    /// No keys file, or its text is what is in force.
    Unchanged,
    /// The file changed and its keys are now in force.
    Replaced { keys: usize },
    /// The file changed but was refused; the keys in force stay.
    Refused(KeysFileError),
}

/// The keys in force.
pub struct LiveKeys {
    hasher: KeyHasher,
    env: KeyRing,
    file: Option<PathBuf>,
    admin: Option<KeyDigest>,
    current: RwLock<Arc<KeyRing>>,
    /// The file text last looked at (digests only), so an unchanged file is
    /// not parsed again.
    file_text: Mutex<Option<Vec<u8>>>,
}

impl LiveKeys {
    /// The keys of `auth`, with its keys file read once now.
    pub fn new(auth: &AuthConfig) -> Self {
        let keys = Self {
            hasher: auth.hasher.clone(),
            env: auth.env_keys.clone(),
            file: auth.keys_file.clone(),
            admin: auth.admin_key,
            current: RwLock::new(Arc::new(auth.env_keys.clone())),
            file_text: Mutex::new(None),
        };
        keys.reload_and_log();
        keys
    }

    /// Who `presented` is, if it is a key in force.
    pub fn resolve(&self, presented: &str) -> Option<KeyMatch> {
        let digest = self.hasher.digest(presented);
        let ring = Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()));
        ring.find(&digest)
    }

    /// Whether `presented` is the admin key.
    pub fn is_admin(&self, presented: &str) -> bool {
        self.admin.is_some_and(|admin| admin.matches(&self.hasher.digest(presented)))
    }

    /// Reads the keys file and puts its keys in force if it changed and is valid.
    pub fn reload(&self) -> Reload {
        let Some(path) = &self.file else { return Reload::Unchanged };
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(source) => return Reload::Refused(KeysFileError::Read { path: path.display().to_string(), source }),
        };
        let mut in_force = self.file_text.lock().unwrap_or_else(|p| p.into_inner());
        if in_force.as_deref() == Some(&text[..]) {
            return Reload::Unchanged;
        }
        let ring = KeyRing::from_file(path).and_then(|file| {
            self.env.merged(&file).map_err(|source| KeysFileError::Key { path: path.display().to_string(), source })
        });
        match ring {
            Ok(ring) => {
                let keys = ring.len();
                *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(ring);
                *in_force = Some(text);
                Reload::Replaced { keys }
            }
            Err(e) => {
                // Remembered so a bad file is reported once, not every second.
                *in_force = Some(text);
                Reload::Refused(e)
            }
        }
    }

    fn reload_and_log(&self) {
        match self.reload() {
            Reload::Unchanged => {}
            Reload::Replaced { keys } => tracing::info!(keys, "api keys loaded from the keys file"),
            Reload::Refused(e) => tracing::error!(error = %e, "keys file refused; the keys in force stay"),
        }
    }

    /// Re-reads the keys file every [`RELOAD_EVERY`] until `shutdown`.
    pub async fn watch(self: Arc<Self>, shutdown: CancellationToken) {
        if self.file.is_none() {
            return;
        }
        let mut ticks = tokio::time::interval(RELOAD_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = ticks.tick() => {
                    let keys = Arc::clone(&self);
                    if tokio::task::spawn_blocking(move || keys.reload_and_log()).await.is_err() {
                        tracing::error!("keys file reload panicked");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_config::apikey::Scope;
    use flotilla_config::Config;
    use flotilla_types::TenantId;

    const SECRET: &str = "a server secret of at least thirty-two bytes";
    const ENV_KEY: &str = "flt_envkey000000000000000000000000000000";
    const FILE_KEY: &str = "flt_filekey00000000000000000000000000000";

    fn entry(id: &str, key: &str, scope: Scope) -> String {
        let hasher = KeyHasher::new(SECRET.as_bytes()).expect("hasher");
        KeyRing::file_entry(id, &TenantId::parse("acme").expect("tenant"), scope, hasher.digest(key))
    }

    /// Finding "API keys": rotation needed a restart. A key added to the keys
    /// file is accepted, and one removed refused, without restarting.
    #[test]
    fn keys_file_changes_take_effect_without_a_restart() {
        let dir = std::env::temp_dir().join(format!("flotilla-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("keys.toml");
        std::fs::write(&path, "").expect("write");
        let env = [
            ("FLOTILLA_API_KEYS", format!("{ENV_KEY}=acme")),
            ("FLOTILLA_API_KEY_SECRET", SECRET.to_owned()),
            ("FLOTILLA_API_KEYS_FILE", path.display().to_string()),
        ];
        let config = Config::from_env(env).expect("config");
        let keys = LiveKeys::new(&config.auth);
        assert!(keys.resolve(ENV_KEY).is_some());
        assert!(keys.resolve(FILE_KEY).is_none());

        std::fs::write(&path, entry("dash", FILE_KEY, Scope::Read)).expect("write");
        assert!(matches!(keys.reload(), Reload::Replaced { keys: 2 }));
        let found = keys.resolve(FILE_KEY).expect("added without a restart");
        assert_eq!((found.id.as_str(), found.scope), ("dash", Scope::Read));
        assert!(matches!(keys.reload(), Reload::Unchanged));

        std::fs::write(&path, entry("again", ENV_KEY, Scope::Write)).expect("write");
        assert!(matches!(keys.reload(), Reload::Refused(_)), "a key of the environment repeated is refused");
        assert!(keys.resolve(FILE_KEY).is_some(), "a refused file leaves the keys in force");

        std::fs::write(&path, "").expect("write");
        assert!(matches!(keys.reload(), Reload::Replaced { keys: 1 }));
        assert!(keys.resolve(FILE_KEY).is_none(), "revoked without a restart");
        std::fs::remove_dir_all(dir).ok();
    }
}
