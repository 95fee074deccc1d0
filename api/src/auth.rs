//! Who is calling: `Authorization: Bearer <key>` resolved to a tenant, with
//! the key's scope enforced, and the admin key of the fleet-wide figures.
//!
//! The key's non-secret id is recorded on the request's span (`key_id`) so
//! every logged request names the key that made it. A read-only key
//! (`scope = "read"`) may only `GET`; anything else answers 403, and so
//! does a `GET` that hands out control, such as a `control` view.

use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method};
use flotilla_config::apikey::{bearer_key, KeyMatch, Scope};
use flotilla_types::TenantId;

use crate::error::ApiError;
use crate::state::AppState;

/// The tenant a request acts for.
#[derive(Debug, Clone)]
pub struct Tenant(pub TenantId);

/// A request made with the admin key.
#[derive(Debug, Clone, Copy)]
pub struct Admin;

fn presented_key(parts: &Parts) -> Result<&str, ApiError> {
    presented_in(&parts.headers)
}

fn presented_in(headers: &HeaderMap) -> Result<&str, ApiError> {
    let header = headers.get(AUTHORIZATION).ok_or(ApiError::Unauthorized)?;
    header.to_str().ok().and_then(bearer_key).ok_or(ApiError::Unauthorized)
}

/// Names the key's tenant and id on the request's span.
fn record_caller(found: &KeyMatch) {
    let span = tracing::Span::current();
    span.record("tenant", found.tenant.as_str());
    span.record("key_id", found.id.as_str());
}

/// The tenant whose key `headers` carry, if any (any scope).
pub fn tenant_of(state: &AppState, headers: &HeaderMap) -> Option<TenantId> {
    let key = headers.get(AUTHORIZATION)?.to_str().ok().and_then(bearer_key)?;
    state.keys().resolve(key).map(|found| found.tenant)
}

/// The scope of the key `headers` carry, if it is a tenant's key.
pub fn scope_of(state: &AppState, headers: &HeaderMap) -> Option<Scope> {
    let key = headers.get(AUTHORIZATION)?.to_str().ok().and_then(bearer_key)?;
    state.keys().resolve(key).map(|found| found.scope)
}

/// The tenant key a request presents, of any scope, once it is known to
/// be one (recorded on the request's span as every route does): `/mcp`
/// forwards it to the routes its tools call, which scope and check it.
pub fn tenant_key<'a>(state: &AppState, headers: &'a HeaderMap) -> Result<&'a str, ApiError> {
    let key = presented_in(headers)?;
    let found = state.keys().resolve(key).ok_or(ApiError::Unauthorized)?;
    record_caller(&found);
    Ok(key)
}

/// Whether a key of `scope` may make a request with `method`.
fn allows(scope: Scope, method: &Method) -> bool {
    match scope {
        Scope::Write => true,
        Scope::Read => method == Method::GET || method == Method::HEAD,
    }
}

impl FromRequestParts<AppState> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let found = state.keys().resolve(presented_key(parts)?).ok_or(ApiError::Unauthorized)?;
        record_caller(&found);
        if !allows(found.scope, &parts.method) {
            return Err(ApiError::ReadOnlyKey);
        }
        Ok(Tenant(found.tenant))
    }
}

impl FromRequestParts<AppState> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if state.keys().is_admin(presented_key(parts)?) {
            tracing::Span::current().record("key_id", "admin");
            Ok(Admin)
        } else {
            Err(ApiError::Unauthorized)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Finding "API keys": read-only keys for dashboards may read, not write.
    #[test]
    fn a_read_key_may_only_get() {
        assert!(allows(Scope::Read, &Method::GET));
        for method in [Method::POST, Method::PATCH, Method::DELETE, Method::PUT] {
            assert!(!allows(Scope::Read, &method), "{method}");
            assert!(allows(Scope::Write, &method), "{method}");
        }
    }
}
