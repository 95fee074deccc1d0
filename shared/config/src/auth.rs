//! Who may call the API: the server secret keys are digested with, the keys
//! given in the environment (digested at load, their text wiped), the keys
//! file the API reloads while it runs, and the admin key of `/metrics`.

use std::path::PathBuf;

use crate::apikey::{self, KeyDigest, KeyEntry, KeyHasher, KeyRing, Scope};
use flotilla_types::ids::TenantId;

use super::{ConfigError, Settings};

/// The authentication settings of the API.
#[derive(Debug, Clone)]
pub struct AuthConfig {
    /// Digests keys with `FLOTILLA_API_KEY_SECRET`, or a random secret of this
    /// process when unset (enough for keys given in plaintext at start).
    pub hasher: KeyHasher,
    /// The keys of `FLOTILLA_API_KEYS`, as digests.
    pub env_keys: KeyRing,
    /// `FLOTILLA_API_KEYS_FILE`: digests the API reloads while it runs.
    pub keys_file: Option<PathBuf>,
    /// `FLOTILLA_ADMIN_KEY`: the key `/metrics` asks for, as a digest; none:
    /// the fleet-wide figures are not served.
    pub admin_key: Option<KeyDigest>,
}

impl AuthConfig {
    pub(super) fn load(s: &Settings) -> Result<Self, ConfigError> {
        let hasher = match s.get("FLOTILLA_API_KEY_SECRET") {
            Some(secret) => KeyHasher::new(secret.trim().as_bytes())
                .map_err(|e| ConfigError::new("FLOTILLA_API_KEY_SECRET", e.to_string()))?,
            None => KeyHasher::ephemeral(),
        };
        let env_keys = parse_shorthand(&hasher, s.text("FLOTILLA_API_KEYS", ""))?;
        let keys_file = s.get("FLOTILLA_API_KEYS_FILE").map(|p| PathBuf::from(p.trim()));
        if let Some(path) = &keys_file {
            if s.get("FLOTILLA_API_KEY_SECRET").is_none() {
                return Err(ConfigError::new(
                    "FLOTILLA_API_KEYS_FILE",
                    "needs FLOTILLA_API_KEY_SECRET, the secret its digests are keyed with",
                ));
            }
            let file = KeyRing::from_file(path).map_err(|e| ConfigError::new("FLOTILLA_API_KEYS_FILE", e.to_string()))?;
            env_keys.merged(&file).map_err(|e| ConfigError::new("FLOTILLA_API_KEYS_FILE", e.to_string()))?;
        }
        let admin_key = match s.get("FLOTILLA_ADMIN_KEY") {
            Some(key) => {
                let key = key.trim();
                apikey::check_format(key).map_err(|e| ConfigError::new("FLOTILLA_ADMIN_KEY", e.to_string()))?;
                let digest = hasher.digest(key);
                if env_keys.find(&digest).is_some() {
                    return Err(ConfigError::new("FLOTILLA_ADMIN_KEY", "must not also be a tenant's key"));
                }
                Some(digest)
            }
            None => None,
        };
        Ok(Self { hasher, env_keys, keys_file, admin_key })
    }

    /// Whether any tenant key is configured (in the environment or a file).
    pub fn has_keys(&self) -> bool {
        !self.env_keys.is_empty() || self.keys_file.is_some()
    }
}

/// `key=tenant[:scope],key2=tenant2` into digests, refusing short keys and
/// a key listed twice.
fn parse_shorthand(hasher: &KeyHasher, raw: &str) -> Result<KeyRing, ConfigError> {
    let fail = |problem: String| ConfigError::new("FLOTILLA_API_KEYS", problem);
    let mut entries = Vec::new();
    for pair in raw.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((key, owner)) = pair.split_once('=') else {
            return Err(fail("each entry must be key=tenant or key=tenant:read".into()));
        };
        let (tenant, scope) = match owner.split_once(':') {
            Some((tenant, scope)) => (tenant, Scope::parse(scope).map_err(|e| fail(e.to_string()))?),
            None => (owner, Scope::Write),
        };
        let tenant = TenantId::parse(tenant.trim()).map_err(|e| fail(e.to_string()))?;
        entries.push(KeyEntry::from_plaintext(hasher, key.trim(), tenant, scope).map_err(|e| fail(e.to_string()))?);
    }
    KeyRing::new(entries).map_err(|e| fail(e.to_string()))
}

#[cfg(test)]
mod tests {
    use crate::apikey::Scope;
    use crate::Config;
    use crate::ConfigError;

    const ACME: &str = "flt_acme0000000000000000000000000000000";
    const GLOBEX: &str = "flt_globex00000000000000000000000000000";

    fn load(vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        Config::from_env(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    /// The README's fleet by hand reads `scripts/fleet.env` in every process:
    /// the API must take its keys and the CLI's key must be one of them.
    #[test]
    fn the_fleet_by_hand_settings_load_and_their_key_is_accepted() {
        let text = include_str!("../../../scripts/fleet.env");
        let vars: Vec<(String, String)> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
            .collect();
        let config = Config::from_env(vars.clone()).expect("fleet.env loads");
        config.require_api_keys().expect("the API starts with fleet.env's keys");
        let cli_key = vars.iter().find(|(k, _)| k == "FLOTILLA_API_KEY").map(|(_, v)| v.as_str()).expect("a CLI key");
        assert!(crate::apikey::check_format(cli_key).is_ok(), "the CLI's key has the API's format");
        let keys = vars.iter().find(|(k, _)| k == "FLOTILLA_API_KEYS").map(|(_, v)| v.as_str()).expect("keys");
        assert!(keys.split(',').any(|pair| pair.split_once('=').is_some_and(|(key, _)| key == cli_key)));
    }

    #[test]
    fn shorthand_keys_map_to_tenants_and_scopes() {
        let config = load(&[("FLOTILLA_API_KEYS", &format!("{ACME}=acme, {GLOBEX}=globex:read"))]).expect("loads");
        let auth = &config.auth;
        let acme = auth.env_keys.find(&auth.hasher.digest(ACME)).expect("acme");
        let globex = auth.env_keys.find(&auth.hasher.digest(GLOBEX)).expect("globex");
        assert_eq!((acme.tenant.as_str(), acme.scope), ("acme", Scope::Write));
        assert_eq!((globex.tenant.as_str(), globex.scope), ("globex", Scope::Read));
        assert!(!format!("{config:?}").contains("acme000"), "keys never print");
    }

    /// Finding "API keys": the minimum was 8 characters; short keys, keys
    /// without the prefix and one key for two tenants are now refused.
    #[test]
    fn short_and_repeated_keys_are_refused() {
        for keys in ["change-me-please=default".to_owned(), format!("{ACME}=acme,{ACME}=globex"), format!("{ACME}=acme:admin")] {
            let err = load(&[("FLOTILLA_API_KEYS", &keys)]).expect_err("refused");
            assert_eq!(err.var, "FLOTILLA_API_KEYS", "{keys}: {err}");
        }
    }

    /// Finding "API keys": the plaintext is not kept in the configuration;
    /// only digests under the server secret are.
    #[test]
    fn only_digests_under_the_secret_are_kept() {
        let secret = "a server secret of at least thirty-two bytes";
        let config = load(&[("FLOTILLA_API_KEYS", &format!("{ACME}=acme")), ("FLOTILLA_API_KEY_SECRET", secret)]).expect("loads");
        let expected = crate::apikey::KeyHasher::new(secret.as_bytes()).expect("hasher").digest(ACME);
        assert!(config.auth.env_keys.find(&expected).is_some());
        let err = load(&[("FLOTILLA_API_KEY_SECRET", "short")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_API_KEY_SECRET");
    }

    #[test]
    fn a_keys_file_needs_the_secret_and_no_repeats() {
        let err = load(&[("FLOTILLA_API_KEYS_FILE", "/nonexistent")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_API_KEYS_FILE");
        let err = load(&[("FLOTILLA_API_KEYS_FILE", "/nonexistent"), ("FLOTILLA_API_KEY_SECRET", &"s".repeat(32))])
            .expect_err("refused");
        assert!(err.problem.contains("cannot read"), "{err}");
        let err = load(&[("FLOTILLA_ADMIN_KEY", "short")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_ADMIN_KEY");
        let err = load(&[("FLOTILLA_API_KEYS", &format!("{ACME}=acme")), ("FLOTILLA_ADMIN_KEY", ACME)]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_ADMIN_KEY");
    }
}
