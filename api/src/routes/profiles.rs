//! `/v1/profiles`: a tenant's saved browser profiles (cookies and local
//! storage a task with `sandbox.profile` loaded and saved back), listed by
//! name and deleted. Their contents never leave the store through the API;
//! the workers seal and open them (`flotilla_blobstore::profiles`).
//!
//! Invariant: every call reaches only the calling tenant's profiles, and a
//! name another tenant saved answers as a name nobody saved; guarded by
//! `desktop_profiles::sandbox_profile_is_loaded_saved_and_kept_to_its_tenant`.

use axum::extract::{FromRequestParts, Path, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use flotilla_blobstore::ProfileError;
use flotilla_types::task::validate_profile_name;
use flotilla_types::ValidationError;
use serde::Serialize;
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::routes::paging::PageParams;
use crate::state::AppState;

/// A saved browser profile.
#[derive(Debug, Serialize, ToSchema)]
pub struct Profile {
    /// The name tasks give as `sandbox.profile`.
    #[schema(example = "work")]
    pub name: String,
    /// The size of the sealed profile in the store.
    pub bytes: u64,
}

/// A page of the tenant's saved browser profiles, by name.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProfileList {
    pub profiles: Vec<Profile>,
    /// Pass as `cursor` for the next page; absent on the last.
    pub next_cursor: Option<String>,
}

/// A profile name taken from the path and checked.
pub struct ProfileNamePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ProfileNamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let Path(raw) = Path::<Vec<String>>::from_request_parts(parts, state)
            .await
            .map_err(|rejection| ApiError::Invalid(ValidationError::at("name", rejection.body_text())))?;
        let name = raw.into_iter().next().unwrap_or_default();
        validate_profile_name(&name).map_err(|e| ApiError::Invalid(ValidationError::at("name", e.message)))?;
        Ok(ProfileNamePath(name))
    }
}

/// List the tenant's saved browser profiles, by name.
#[utoipa::path(
    get,
    path = "/v1/profiles",
    tag = "profiles",
    params(PageParams, ("cursor" = Option<String>, Query, description = "The `next_cursor` of the previous page; empty or absent for the first", pattern = r"^([A-Za-z0-9_-][A-Za-z0-9._-]{0,63})?(?![\s\S])")),
    responses(
        (status = 200, description = "One page; follow `next_cursor` until it is absent", body = ProfileList),
        (status = 400, description = "Bad `limit` or `cursor`", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 503, description = "The blob store is unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<PageParams>,
) -> Result<Json<ProfileList>, ApiError> {
    let limit = params.limit()?;
    let after = params.cursor(|c| validate_profile_name(c).is_ok().then(|| c.to_owned()))?;
    let Some(store) = state.blobs() else { return Ok(Json(ProfileList { profiles: Vec::new(), next_cursor: None })) };
    let (saved, more) = store.list_profiles(&tenant, after.as_deref(), limit).await.map_err(ApiError::Store)?;
    let next_cursor = more.then(|| saved.last().map(|p| p.name.clone())).flatten();
    let profiles = saved.into_iter().map(|p| Profile { name: p.name, bytes: p.bytes }).collect();
    Ok(Json(ProfileList { profiles, next_cursor }))
}

/// Delete one of the tenant's saved browser profiles.
#[utoipa::path(
    delete,
    path = "/v1/profiles/{name}",
    tag = "profiles",
    params(("name" = String, Path, description = "The profile's name", pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}(?![\s\S])")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Malformed name", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such profile for this tenant", body = ErrorBody),
        (status = 503, description = "The blob store is unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ProfileNamePath(name): ProfileNamePath,
) -> Result<StatusCode, ApiError> {
    let Some(store) = state.blobs() else { return Err(ApiError::NotFound(NO_SUCH_PROFILE)) };
    match store.delete_profile(&tenant, &name).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT),
        Ok(false) => Err(ApiError::NotFound(NO_SUCH_PROFILE)),
        Err(ProfileError::Store(e)) => Err(ApiError::Store(e)),
        Err(e) => Err(ApiError::Invalid(ValidationError::at("name", e.to_string()))),
    }
}

const NO_SUCH_PROFILE: &str = "no such profile";
