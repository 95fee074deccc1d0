//! API keys: their format, their keyed digest and the ring of known keys.
//!
//! A key is `flt_` followed by at least 32 letters and digits (a random key
//! from [`generate`] has 43, about 256 bits). Only its HMAC-SHA256 under the
//! server's secret ([`KeyHasher`]) is ever kept: the plaintext a setting
//! carried is wiped once digested, and a digest taken from a memory dump or a
//! keys file is worthless without the secret. Each key has a non-secret id
//! (named in its keys-file entry, else the first 12 hex digits of its digest)
//! that requests log for audit. A key maps to exactly one tenant and scope:
//! a ring with one digest twice is refused, so a key listed for two tenants
//! cannot resolve silently.

use std::collections::HashSet;
use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use rand::distr::{Alphanumeric, SampleString};
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::{Zeroize, Zeroizing};

use flotilla_types::ids::TenantId;

/// What every API key starts with, so a leaked one is recognisable.
pub const KEY_PREFIX: &str = "flt_";

/// The fewest random characters after [`KEY_PREFIX`].
pub const MIN_KEY_CHARS: usize = 32;

/// Characters a fresh key carries after its prefix (62^43 ≈ 2^256).
const GENERATED_KEY_CHARS: usize = 43;

/// The fewest bytes of the server secret.
pub const MIN_SECRET_BYTES: usize = 32;

/// Why a key, a secret or a ring was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("a key must be {KEY_PREFIX} followed by at least {MIN_KEY_CHARS} letters and digits")]
    Format,
    #[error("the key secret must be at least {MIN_SECRET_BYTES} bytes")]
    ShortSecret,
    #[error("a key is listed twice (ids {first} and {second})")]
    Duplicate { first: String, second: String },
    #[error("key id {0:?} is listed twice")]
    DuplicateId(String),
    #[error("{0:?} is not a digest: expected 64 hex digits")]
    Digest(String),
    #[error("{0:?} is not a key id: expected 1-64 of A-Z a-z 0-9 - _ .")]
    Id(String),
    #[error("{0:?} is not a scope: expected read or write")]
    Scope(String),
}

/// What a key may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Reads only (`GET`): for dashboards and reports.
    Read,
    /// Everything its tenant may do.
    Write,
}

impl Scope {
    pub fn parse(text: &str) -> Result<Self, KeyError> {
        match text.trim() {
            "read" => Ok(Self::Read),
            "write" => Ok(Self::Write),
            other => Err(KeyError::Scope(other.to_owned())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Read => "read",
            Self::Write => "write",
        }
    }
}

/// The HMAC-SHA256 of a key under the server secret.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct KeyDigest([u8; 32]);

impl KeyDigest {
    /// A digest written as 64 hex digits (as in a keys file).
    pub fn from_hex(text: &str) -> Result<Self, KeyError> {
        let text = text.trim();
        let bad = || KeyError::Digest(text.chars().take(80).collect());
        if text.len() != 64 {
            return Err(bad());
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2).ok_or_else(bad)?, 16).map_err(|_| bad())?;
        }
        Ok(Self(bytes))
    }

    pub fn to_hex(self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Compares in time independent of where the digests differ.
    pub fn matches(&self, other: &KeyDigest) -> bool {
        self.0.ct_eq(&other.0).into()
    }

    /// The id a key gets when none is named: not secret, since it is a
    /// prefix of a keyed digest.
    fn default_id(self) -> String {
        self.to_hex()[..12].to_owned()
    }
}

impl fmt::Debug for KeyDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyDigest({}…)", &self.to_hex()[..12])
    }
}

/// Digests keys with the server secret, which it wipes when dropped.
#[derive(Clone)]
pub struct KeyHasher {
    secret: Zeroizing<Vec<u8>>,
}

impl KeyHasher {
    /// A hasher over `secret` (at least [`MIN_SECRET_BYTES`] bytes).
    pub fn new(secret: &[u8]) -> Result<Self, KeyError> {
        if secret.len() < MIN_SECRET_BYTES {
            return Err(KeyError::ShortSecret);
        }
        Ok(Self { secret: Zeroizing::new(secret.to_vec()) })
    }

    /// A hasher with a random secret for this process alone: enough for keys
    /// given in plaintext at start, not for digests written down elsewhere.
    pub fn ephemeral() -> Self {
        let secret: [u8; 32] = rand::random();
        Self { secret: Zeroizing::new(secret.to_vec()) }
    }

    /// The digest of `key`, whatever its format (a presented key is hashed
    /// before anything is known about it).
    pub fn digest(&self, key: &str) -> KeyDigest {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.secret).expect("HMAC takes a key of any length");
        mac.update(key.as_bytes());
        KeyDigest(mac.finalize().into_bytes().into())
    }
}

impl fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("KeyHasher(***)")
    }
}

/// The key of an `Authorization` header's value, when it is
/// `Bearer <key>` (the scheme in any case).
pub fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let key = key.trim();
    (!key.is_empty()).then_some(key)
}

/// Checks that `key` has the API key format.
pub fn check_format(key: &str) -> Result<(), KeyError> {
    let rest = key.strip_prefix(KEY_PREFIX).ok_or(KeyError::Format)?;
    if rest.len() >= MIN_KEY_CHARS && rest.chars().all(|c| c.is_ascii_alphanumeric()) {
        Ok(())
    } else {
        Err(KeyError::Format)
    }
}

/// A fresh random key.
pub fn generate() -> Zeroizing<String> {
    let mut key = Zeroizing::new(String::from(KEY_PREFIX));
    let mut random = Alphanumeric.sample_string(&mut rand::rng(), GENERATED_KEY_CHARS);
    key.push_str(&random);
    random.zeroize();
    key
}

/// Checks a key id (what logs name a key by).
pub fn check_id(id: &str) -> Result<(), KeyError> {
    let ok = !id.is_empty() && id.len() <= 64 && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(())
    } else {
        Err(KeyError::Id(id.chars().take(80).collect()))
    }
}

/// One known key: its digest, and whom it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub id: String,
    pub tenant: TenantId,
    pub scope: Scope,
    pub digest: KeyDigest,
}

impl KeyEntry {
    /// An entry for a plaintext key, digested at once; its id is derived
    /// from the digest.
    pub fn from_plaintext(hasher: &KeyHasher, key: &str, tenant: TenantId, scope: Scope) -> Result<Self, KeyError> {
        check_format(key)?;
        let digest = hasher.digest(key);
        Ok(Self { id: digest.default_id(), tenant, scope, digest })
    }
}

/// What a presented key resolved to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyMatch {
    pub id: String,
    pub tenant: TenantId,
    pub scope: Scope,
}

/// The known keys, as digests; every digest and every id at most once.
#[derive(Debug, Clone, Default)]
pub struct KeyRing {
    entries: Vec<KeyEntry>,
}

impl KeyRing {
    /// A ring of `entries`, refused when a digest or an id repeats.
    pub fn new(entries: Vec<KeyEntry>) -> Result<Self, KeyError> {
        let mut ids = HashSet::new();
        for (i, entry) in entries.iter().enumerate() {
            if let Some(earlier) = entries[..i].iter().find(|e| e.digest.matches(&entry.digest)) {
                return Err(KeyError::Duplicate { first: earlier.id.clone(), second: entry.id.clone() });
            }
            if !ids.insert(entry.id.as_str()) {
                return Err(KeyError::DuplicateId(entry.id.clone()));
            }
        }
        Ok(Self { entries })
    }

    /// This ring and `other` together, refused on any repeat.
    pub fn merged(&self, other: &KeyRing) -> Result<Self, KeyError> {
        Self::new(self.entries.iter().chain(&other.entries).cloned().collect())
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry whose digest is `presented`'s; every entry is compared, so
    /// the time taken does not tell which one matched.
    pub fn find(&self, presented: &KeyDigest) -> Option<KeyMatch> {
        let mut found = None;
        for entry in &self.entries {
            if entry.digest.matches(presented) && found.is_none() {
                found = Some(entry);
            }
        }
        found.map(|e| KeyMatch { id: e.id.clone(), tenant: e.tenant.clone(), scope: e.scope })
    }
}

/// Why a keys file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeysFileError {
    #[error("cannot read {path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: {source}")]
    Key { path: String, source: KeyError },
}

/// A keys file: `[[keys]]` tables of `id`, `tenant`, `scope` and `digest`
/// (hex HMAC-SHA256 under the server secret). No plaintext key is ever in it.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct KeysFile {
    #[serde(default)]
    keys: Vec<FileEntry>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    id: String,
    tenant: String,
    #[serde(default = "default_scope")]
    scope: String,
    digest: String,
}

fn default_scope() -> String {
    "write".to_owned()
}

impl KeyRing {
    /// The ring a keys file at `path` lists.
    pub fn from_file(path: &std::path::Path) -> Result<Self, KeysFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| KeysFileError::Read { path: shown.clone(), source })?;
        Self::from_toml(&text).map_err(|e| match e {
            KeysFileError::Parse { message, .. } => KeysFileError::Parse { path: shown.clone(), message },
            KeysFileError::Key { source, .. } => KeysFileError::Key { path: shown.clone(), source },
            other => other,
        })
    }

    /// The ring a keys file's text lists.
    pub fn from_toml(text: &str) -> Result<Self, KeysFileError> {
        let parse = |message: String| KeysFileError::Parse { path: String::new(), message };
        let key = |source: KeyError| KeysFileError::Key { path: String::new(), source };
        let file: KeysFile = toml::from_str(text).map_err(|e| parse(e.message().to_owned()))?;
        let mut entries = Vec::with_capacity(file.keys.len());
        for entry in file.keys {
            check_id(&entry.id).map_err(key)?;
            let tenant = TenantId::parse(entry.tenant.trim()).map_err(|e| parse(format!("key {}: {e}", entry.id)))?;
            let scope = Scope::parse(&entry.scope).map_err(key)?;
            let digest = KeyDigest::from_hex(&entry.digest).map_err(key)?;
            entries.push(KeyEntry { id: entry.id, tenant, scope, digest });
        }
        Self::new(entries).map_err(key)
    }

    /// The keys file entry of a key with this digest.
    pub fn file_entry(id: &str, tenant: &TenantId, scope: Scope, digest: KeyDigest) -> String {
        format!(
            "[[keys]]\nid = \"{id}\"\ntenant = \"{}\"\nscope = \"{}\"\ndigest = \"{}\"\n",
            tenant.as_str(),
            scope.as_str(),
            digest.to_hex()
        )
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_the_bearer_scheme_carries_a_key() {
        use super::bearer_key;
        assert_eq!(bearer_key("Bearer abc"), Some("abc"));
        assert_eq!(bearer_key("bearer  abc "), Some("abc"));
        assert_eq!(bearer_key("Basic YWJjOmRlZg=="), None);
        assert_eq!(bearer_key("Bearer"), None);
        assert_eq!(bearer_key("Bearer "), None);
        assert_eq!(bearer_key("abc"), None);
    }

    use super::*;

    fn hasher() -> KeyHasher {
        KeyHasher::new(b"0123456789abcdef0123456789abcdef").expect("secret")
    }

    fn tenant(t: &str) -> TenantId {
        TenantId::parse(t).expect("tenant")
    }

    const ACME: &str = "flt_acme0000000000000000000000000000000";

    /// Finding "API keys": "`zeroize` the rest". The server secret a hasher
    /// holds and every generated key are wiped when dropped: their types
    /// must implement `ZeroizeOnDrop`, or this does not compile.
    #[test]
    fn the_server_secret_and_generated_keys_are_wiped_when_dropped() {
        fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>(_: &T) {}
        let hasher = hasher();
        wiped_on_drop(&hasher.secret);
        wiped_on_drop(&KeyHasher::ephemeral().secret);
        let key = generate();
        wiped_on_drop(&key);
        check_format(&key).expect("a generated key has the format");
    }
    const GLOBEX: &str = "flt_globex00000000000000000000000000000";

    fn ring() -> KeyRing {
        let h = hasher();
        KeyRing::new(vec![
            KeyEntry::from_plaintext(&h, ACME, tenant("acme"), Scope::Write).expect("acme"),
            KeyEntry::from_plaintext(&h, GLOBEX, tenant("globex"), Scope::Read).expect("globex"),
        ])
        .expect("ring")
    }

    #[test]
    fn a_known_key_names_its_tenant_scope_and_id() {
        let found = ring().find(&hasher().digest(GLOBEX)).expect("found");
        assert_eq!((found.tenant.as_str(), found.scope), ("globex", Scope::Read));
        assert_eq!(found.id, hasher().digest(GLOBEX).to_hex()[..12]);
        assert_eq!(ring().find(&hasher().digest(ACME)).map(|m| m.tenant), Some(tenant("acme")));
    }

    #[test]
    fn unknown_and_near_keys_are_refused() {
        let near = ["", "flt_acme000000000000000000000000000000", "FLT_acme0000000000000000000000000000000"];
        for presented in near.iter().copied().chain([&format!("{ACME} ")[..], &format!("{ACME}0")[..]]) {
            assert_eq!(ring().find(&hasher().digest(presented)), None, "{presented:?}");
        }
    }

    /// Finding "API keys": a digest under another secret matches nothing, so
    /// digests are worthless without the server's secret.
    #[test]
    fn a_digest_depends_on_the_secret() {
        let other = KeyHasher::new(b"another secret of at least 32 bytes").expect("secret");
        assert_ne!(hasher().digest(ACME), other.digest(ACME));
        assert_eq!(ring().find(&other.digest(ACME)), None);
        assert!(KeyHasher::new(b"short").is_err());
    }

    /// Finding "API keys": short keys and keys without the prefix are refused.
    #[test]
    fn keys_must_be_long_and_prefixed() {
        for bad in
            ["change-me-please", "flt_short", "sk_0123456789012345678901234567890123", "flt_has space 00000000000000000000000000"]
        {
            assert_eq!(check_format(bad), Err(KeyError::Format), "{bad}");
        }
        let fresh = generate();
        check_format(&fresh).expect("a generated key has the format");
        assert_ne!(*fresh, *generate(), "keys are random");
    }

    /// Finding "API keys": one key listed for two tenants is refused instead
    /// of resolving to whichever comes first.
    #[test]
    fn a_key_listed_twice_is_refused() {
        let h = hasher();
        let twice = vec![
            KeyEntry::from_plaintext(&h, ACME, tenant("acme"), Scope::Write).expect("acme"),
            KeyEntry::from_plaintext(&h, ACME, tenant("globex"), Scope::Write).expect("globex"),
        ];
        assert!(matches!(KeyRing::new(twice), Err(KeyError::Duplicate { .. })));
    }

    #[test]
    fn a_keys_file_lists_digests_and_refuses_repeats() {
        let h = hasher();
        let acme = KeyRing::file_entry("acme-ci", &tenant("acme"), Scope::Write, h.digest(ACME));
        let globex = KeyRing::file_entry("globex-dash", &tenant("globex"), Scope::Read, h.digest(GLOBEX));
        let ring = KeyRing::from_toml(&format!("{acme}\n{globex}")).expect("loads");
        let found = ring.find(&h.digest(GLOBEX)).expect("globex");
        assert_eq!((found.id.as_str(), found.scope), ("globex-dash", Scope::Read));
        let twice = KeyRing::file_entry("again", &tenant("globex"), Scope::Write, h.digest(ACME));
        assert!(KeyRing::from_toml(&format!("{acme}\n{twice}")).is_err(), "a digest twice");
        assert!(KeyRing::from_toml("[[keys]]\nid = \"x\"\ntenant = \"acme\"\ndigest = \"00\"\n").is_err());
        assert!(KeyRing::from_toml("[[keys]]\nkey = \"flt_plain\"\n").is_err(), "no plaintext field");
    }

    #[test]
    fn digests_round_trip_through_hex() {
        let digest = hasher().digest(ACME);
        assert_eq!(KeyDigest::from_hex(&digest.to_hex()), Ok(digest));
        assert!(KeyDigest::from_hex("zz").is_err());
        assert!(!format!("{:?}", hasher()).contains("0123"), "the secret never prints");
    }
}
