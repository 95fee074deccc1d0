//! Who is calling: `Authorization: Bearer <key>` resolved to a tenant.
//!
//! Keys are kept only as SHA-256 digests, and a presented key is compared
//! with every known digest without stopping early, so neither the answer's
//! timing nor a memory dump gives a key away.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use flotilla_shared::config::Secret;
use flotilla_shared::TenantId;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::state::AppState;

/// The tenant a request acts for.
#[derive(Debug, Clone)]
pub struct Tenant(pub TenantId);

/// The configured API keys, as digests.
pub struct ApiKeys {
    entries: Vec<([u8; 32], TenantId)>,
}

impl ApiKeys {
    pub fn new(keys: &[(Secret, TenantId)]) -> Self {
        let entries = keys.iter().map(|(key, tenant)| (digest(key.expose()), tenant.clone())).collect();
        Self { entries }
    }

    /// The tenant of `presented`, if it is a known key.
    pub fn tenant_for(&self, presented: &str) -> Option<&TenantId> {
        let wanted = digest(presented);
        let mut found = None;
        for (known, tenant) in &self.entries {
            if same_digest(known, &wanted) && found.is_none() {
                found = Some(tenant);
            }
        }
        found
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

/// Compares two digests in time independent of where they differ.
fn same_digest(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The key of an `Authorization: Bearer <key>` header value.
fn bearer_key(value: &str) -> Option<&str> {
    let (scheme, key) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let key = key.trim();
    (!key.is_empty()).then_some(key)
}

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts.headers.get(AUTHORIZATION).ok_or(ApiError::Unauthorized)?;
        let key = header.to_str().ok().and_then(bearer_key).ok_or(ApiError::Unauthorized)?;
        let tenant = state.keys().tenant_for(key).ok_or(ApiError::Unauthorized)?;
        tracing::Span::current().record("tenant", tenant.as_str());
        Ok(Tenant(tenant.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> ApiKeys {
        let tenant = |t: &str| TenantId::parse(t).expect("tenant");
        ApiKeys::new(&[(Secret::new("key-of-acme"), tenant("acme")), (Secret::new("key-of-globex"), tenant("globex"))])
    }

    #[test]
    fn a_known_key_names_its_tenant() {
        assert_eq!(keys().tenant_for("key-of-globex").map(TenantId::as_str), Some("globex"));
        assert_eq!(keys().tenant_for("key-of-acme").map(TenantId::as_str), Some("acme"));
    }

    #[test]
    fn unknown_and_near_keys_are_refused() {
        for presented in ["", "key-of-acm", "key-of-acme ", "KEY-OF-ACME", "key-of-acmex"] {
            assert_eq!(keys().tenant_for(presented), None, "{presented:?}");
        }
    }

    #[test]
    fn only_the_bearer_scheme_carries_a_key() {
        assert_eq!(bearer_key("Bearer abc"), Some("abc"));
        assert_eq!(bearer_key("bearer  abc "), Some("abc"));
        assert_eq!(bearer_key("Basic YWJjOmRlZg=="), None);
        assert_eq!(bearer_key("Bearer"), None);
        assert_eq!(bearer_key("Bearer "), None);
        assert_eq!(bearer_key("abc"), None);
    }
}
