//! Saved browser profiles: one object per tenant and profile name, under
//! `<prefix>profiles/<tenant>/<name>.sealed`, holding the profile's archive
//! sealed with XChaCha20-Poly1305 under the configured key
//! (`FLOTILLA_PROFILE_KEY`): a random 24-byte nonce, then the ciphertext
//! and its tag. The tenant and the name are the associated data, so a
//! sealed profile copied under another tenant's or name's key does not
//! open. Every call names the tenant, and the key is built from it, so a
//! tenant reaches only its own profiles.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use flotilla_config::ProfileKey;
use flotilla_types::ids::TenantId;
use flotilla_types::task::validate_profile_name;
use serde::Serialize;

use super::{BlobError, BlobStore, Bytes};

/// The length of the nonce at the start of a sealed profile.
const NONCE_BYTES: usize = 24;
/// The ending of a sealed profile's key.
const SEALED: &str = ".sealed";

/// A saved profile as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProfileInfo {
    pub name: String,
    /// The sealed object's size.
    pub bytes: u64,
}

/// Why a stored profile could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProfileError {
    #[error(transparent)]
    Store(#[from] BlobError),
    /// The object does not open under this key for this tenant and name:
    /// sealed under another key, or changed.
    #[error("the saved profile does not open with the configured FLOTILLA_PROFILE_KEY")]
    Unsealable,
    #[error("profile name {0:?} is not 1 to 64 letters, digits, '.', '_' or '-' (not starting with '.')")]
    InvalidName(String),
}

impl BlobStore {
    /// Seals and stores `archive` as `tenant`'s profile `name`, replacing
    /// the one before; returns the sealed size.
    pub async fn put_profile(
        &self,
        key: &ProfileKey,
        tenant: &TenantId,
        name: &str,
        archive: &[u8],
    ) -> Result<u64, ProfileError> {
        let object = self.profile_key(tenant, name)?;
        let sealed = seal(key, tenant, name, archive);
        let size = sealed.len() as u64;
        self.inner.bucket.put(&object, Bytes::from(sealed), "application/octet-stream", false).await?;
        Ok(size)
    }

    /// `tenant`'s profile `name`, opened; `None` when it has none by that
    /// name.
    pub async fn get_profile(&self, key: &ProfileKey, tenant: &TenantId, name: &str) -> Result<Option<Vec<u8>>, ProfileError> {
        let object = self.profile_key(tenant, name)?;
        match self.inner.bucket.get(&object).await {
            Ok(sealed) => open(key, tenant, name, &sealed).map(Some),
            Err(BlobError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A page of `tenant`'s saved profiles in key order: at most `limit`
    /// after the profile named `after`, and whether more follow.
    pub async fn list_profiles(
        &self,
        tenant: &TenantId,
        after: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<ProfileInfo>, bool), BlobError> {
        let prefix = self.inner.layout.tenant_profiles(tenant);
        let start_after = after.map_or_else(|| prefix.clone(), |name| format!("{prefix}{name}{SEALED}"));
        let max = i32::try_from(limit.saturating_add(1)).unwrap_or(i32::MAX);
        let objects = self.inner.bucket.list_after(&prefix, &start_after, max).await?;
        let more = objects.len() > limit;
        let profiles = objects
            .into_iter()
            .take(limit)
            .filter_map(|o| {
                let name = o.key.strip_prefix(&prefix)?.strip_suffix(SEALED)?;
                validate_profile_name(name).is_ok().then(|| ProfileInfo { name: name.to_owned(), bytes: o.size })
            })
            .collect();
        Ok((profiles, more))
    }

    /// Deletes `tenant`'s profile `name`; `false` when it had none.
    pub async fn delete_profile(&self, tenant: &TenantId, name: &str) -> Result<bool, ProfileError> {
        let object = self.profile_key(tenant, name)?;
        if self.inner.bucket.head(&object).await?.is_none() {
            return Ok(false);
        }
        self.inner.bucket.delete(&object).await?;
        Ok(true)
    }

    fn profile_key(&self, tenant: &TenantId, name: &str) -> Result<String, ProfileError> {
        validate_profile_name(name).map_err(|_| ProfileError::InvalidName(name.to_owned()))?;
        Ok(format!("{}{name}{SEALED}", self.inner.layout.tenant_profiles(tenant)))
    }
}

/// What binds a sealed profile to its owner and name.
fn associated_data(tenant: &TenantId, name: &str) -> Vec<u8> {
    format!("flotilla-profile\0{}\0{name}", tenant.as_str()).into_bytes()
}

fn seal(key: &ProfileKey, tenant: &TenantId, name: &str, archive: &[u8]) -> Vec<u8> {
    let cipher = XChaCha20Poly1305::new(key.expose().into());
    let nonce = XChaCha20Poly1305::generate_nonce(&mut OsRng);
    let aad = associated_data(tenant, name);
    let sealed = cipher.encrypt(&nonce, Payload { msg: archive, aad: &aad }).expect("XChaCha20-Poly1305 seals any length");
    let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

fn open(key: &ProfileKey, tenant: &TenantId, name: &str, sealed: &[u8]) -> Result<Vec<u8>, ProfileError> {
    if sealed.len() < NONCE_BYTES {
        return Err(ProfileError::Unsealable);
    }
    let (nonce, ciphertext) = sealed.split_at(NONCE_BYTES);
    let cipher = XChaCha20Poly1305::new(key.expose().into());
    let aad = associated_data(tenant, name);
    cipher.decrypt(XNonce::from_slice(nonce), Payload { msg: ciphertext, aad: &aad }).map_err(|_| ProfileError::Unsealable)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> ProfileKey {
        ProfileKey::from_hex(&format!("{byte:02x}").repeat(32)).expect("a key")
    }

    #[test]
    fn a_sealed_profile_opens_only_with_its_key_tenant_and_name() {
        let (acme, globex) = (TenantId::parse("acme").expect("id"), TenantId::parse("globex").expect("id"));
        let archive = b"cookie: session=very-secret-value".repeat(4);
        let sealed = seal(&key(1), &acme, "work", &archive);
        assert!(!sealed.windows(17).any(|w| w == b"very-secret-value"), "the sealed bytes are not the plaintext");
        assert_eq!(open(&key(1), &acme, "work", &sealed).expect("opens"), archive);
        assert_eq!(open(&key(2), &acme, "work", &sealed), Err(ProfileError::Unsealable));
        assert_eq!(open(&key(1), &globex, "work", &sealed), Err(ProfileError::Unsealable));
        assert_eq!(open(&key(1), &acme, "home", &sealed), Err(ProfileError::Unsealable));
        let mut changed = sealed.clone();
        *changed.last_mut().expect("bytes") ^= 1;
        assert_eq!(open(&key(1), &acme, "work", &changed), Err(ProfileError::Unsealable));
        assert_ne!(seal(&key(1), &acme, "work", &archive), sealed, "every seal has its own nonce");
    }
}
