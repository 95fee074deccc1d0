//! Presigned links for what a task stored: its screenshots (listed from its
//! `screenshot` events, latest attempt only), its files (from its `file`
//! events, likewise) and its artifacts. Signing is
//! local, so a task page costs no request to the store. Without a configured
//! store the list is still given, without URLs.

use flotilla_blobstore::BlobStore;
use flotilla_queue::queue::TaskRecord;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::state::AppState;

/// Fills in the task's `screenshots`, its `files` and the `url` of each
/// artifact.
pub async fn attach_urls(state: &AppState, task: &mut TaskRecord) -> Result<(), ApiError> {
    let shots = state.queue().reader().screenshots(&task.tenant, &task.id).await?;
    let store = state.blobs();
    let mut listed = Vec::with_capacity(shots.len());
    for shot in shots {
        let url = presign(store, &shot.key, state).await;
        listed.push(json!({ "seq": shot.seq, "hash": shot.hash, "key": shot.key, "url": url }));
    }
    task.screenshots = listed;
    let files = state.queue().reader().files(&task.tenant, &task.id).await?;
    let mut listed = Vec::with_capacity(files.len());
    for file in files {
        let key = store.and_then(|s| s.layout().artifact(&task.id, &file.path).ok());
        let url = match &key {
            Some(key) => presign(store, key, state).await,
            None => Value::Null,
        };
        listed.push(json!({ "path": file.path, "hash": file.hash, "bytes": file.bytes, "key": key, "url": url }));
    }
    task.files = listed;
    let artifacts = task.result.as_mut().and_then(|r| r.get_mut("artifacts")).and_then(Value::as_array_mut);
    for artifact in artifacts.into_iter().flatten() {
        let Some(key) = artifact.get("key").and_then(Value::as_str).map(str::to_owned) else { continue };
        let url = presign(store, &key, state).await;
        if let Some(fields) = artifact.as_object_mut() {
            fields.insert("url".into(), url);
        }
    }
    Ok(())
}

/// A presigned `GET` URL for `key`, or null when there is no store or the
/// key cannot be signed.
async fn presign(store: Option<&BlobStore>, key: &str, state: &AppState) -> Value {
    let Some(store) = store else { return Value::Null };
    match store.presigned_get(key, state.config().s3.url_ttl).await {
        Ok(url) => Value::String(url.url),
        Err(e) => {
            tracing::warn!(key, error = %e, "could not presign a stored object");
            Value::Null
        }
    }
}
