//! Finished tasks past the hot window, in the object store.
//!
//! A finished task's hash (record and events) and its tenant's feed
//! entries cost Redis memory for the whole retention, though nobody writes
//! them any more. After the hot window (`FLOTILLA_ARCHIVE_AFTER_S`) the
//! archive pass ([`pass`]) moves them to the object store the fleet already
//! uses, under the tenant's own prefix (`archive/<tenant>/…`):
//!
//! - one object per task, `tasks/<task id>.json`: every field of its hash,
//!   events included, as they were;
//! - feed segments, `feed/<last position>.jsonl`: the tenant feed's entries
//!   older than the hot window, one `<position> <event>` a line ([`feed`]).
//!
//! What stays in Redis per archived task is one member of the tenant's
//! `archived` set (its end time and outcome in the score) beside its
//! entry in the tenant's index. Readers ([`Reader::get`], listings, a
//! task's events, batch counts, `GET /v1/events`) look in Redis first and
//! in the archive for what Redis no longer holds, so users see the same
//! answers for the whole retention. Every read names the tenant, and the
//! tenant names the object, so a tenant never reads another's archive.
//!
//! Invariant: an object is durably written before what it holds leaves
//! Redis, and leaving is one script that checks the task is still the one
//! written (same `seq`), so a pass killed anywhere loses nothing and a rerun
//! writes the same objects again and deletes nothing twice. On a cluster the
//! pass does nothing (a task and its tenant's keys are in different slots);
//! there finished tasks stay in Redis until their TTL, as before.

mod feed;
mod pass;

use std::collections::HashMap;
use std::time::Duration;

use futures::StreamExt;
use serde::{Deserialize, Serialize};

use super::Queue;
use crate::error::QueueError;
use flotilla_blobstore::{BlobError, BlobStore};
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::TaskStatus;

pub use pass::ArchivePass;

/// How many objects one reader fetches at once.
const READS_AT_ONCE: usize = 16;

/// The object store and the hot window.
#[derive(Clone)]
pub(super) struct Archive {
    store: BlobStore,
    hot: Duration,
}

impl Archive {
    pub(super) fn new(store: BlobStore, hot: Duration) -> Self {
        Self { store, hot }
    }
}

/// One archived task's object: its hash, every field as it was.
#[derive(Serialize, Deserialize)]
struct ArchivedTask {
    v: u32,
    fields: HashMap<String, String>,
}

/// A failure of the store, as the queue reports it.
pub(super) fn store_failed(e: BlobError) -> QueueError {
    QueueError::Archive(e.to_string())
}

/// What the archive holds of one task.
pub(super) enum Archived {
    /// Nothing: the task is not archived.
    No,
    /// The task is archived with an outcome the reader did not want.
    Skipped,
    /// Its whole hash.
    Read(HashMap<String, String>),
}

/// The score of an archived task in its tenant's `archived` set.
fn archived_score(finished_at_ms: i64, status: TaskStatus) -> Option<i64> {
    let outcome = match status {
        TaskStatus::Succeeded => 0,
        TaskStatus::Failed => 1,
        TaskStatus::Cancelled => 2,
        _ => return None,
    };
    Some(finished_at_ms * 4 + outcome)
}

/// An archived task's outcome and end time (epoch ms), from its score.
fn archived_state(score: f64) -> Option<(TaskStatus, i64)> {
    let score = score as i64;
    let status = match score % 4 {
        0 => TaskStatus::Succeeded,
        1 => TaskStatus::Failed,
        2 => TaskStatus::Cancelled,
        _ => return None,
    };
    Some((status, score / 4))
}

impl Queue {
    /// The outcome and end time of each of `tenant`'s tasks that is in the
    /// archive (`None` for the others); no object is read.
    pub(super) async fn archived_states(
        &self,
        tenant: &TenantId,
        ids: &[&TaskId],
    ) -> Result<Vec<Option<(TaskStatus, i64)>>, QueueError> {
        if self.archive.is_none() || ids.is_empty() {
            return Ok(vec![None; ids.len()]);
        }
        let mut conn = self.redis.shared();
        let scores: Vec<Option<f64>> = redis::cmd("ZMSCORE")
            .arg(self.keys.archived(tenant))
            .arg(ids.iter().map(|id| id.as_str()).collect::<Vec<_>>())
            .query_async(&mut conn)
            .await?;
        Ok(scores.into_iter().map(|s| s.and_then(archived_state)).collect())
    }

    /// The whole stored hash of each of `tenant`'s tasks as the archive
    /// holds it: read when `wanted` lets its outcome through, skipped when
    /// not, absent when the task is not archived (or its object is gone
    /// with the retention).
    pub(super) async fn archived_hashes(
        &self,
        tenant: &TenantId,
        ids: &[&TaskId],
        wanted: impl Fn(TaskStatus) -> bool,
    ) -> Result<Vec<Archived>, QueueError> {
        let Some(archive) = &self.archive else { return Ok(ids.iter().map(|_| Archived::No).collect()) };
        let states = self.archived_states(tenant, ids).await?;
        let reads: Vec<_> = ids
            .iter()
            .zip(states)
            .map(|(id, state)| {
                let key = archive.store.layout().archived_task(tenant, id);
                let store = archive.store.clone();
                let read = state.map(|(status, _)| wanted(status));
                async move {
                    match read {
                        None => return Ok(Archived::No),
                        Some(false) => return Ok(Archived::Skipped),
                        Some(true) => {}
                    }
                    match store.get(&key).await {
                        Ok(bytes) => Ok(serde_json::from_slice::<ArchivedTask>(&bytes)
                            .map(|task| Archived::Read(task.fields))
                            .map_err(|e| QueueError::Corrupt(format!("archived task {key}: {e}")))?),
                        Err(BlobError::NotFound { .. }) => Ok(Archived::No),
                        Err(e) => Err(store_failed(e)),
                    }
                }
            })
            .collect();
        let fetched: Vec<Result<_, QueueError>> = futures::stream::iter(reads).buffered(READS_AT_ONCE).collect().await;
        fetched.into_iter().collect()
    }

    /// Whether each of `tenant`'s tasks is in the archive.
    pub(super) async fn are_archived(&self, tenant: &TenantId, ids: &[&TaskId]) -> Result<Vec<bool>, QueueError> {
        Ok(self.archived_states(tenant, ids).await?.into_iter().map(|s| s.is_some()).collect())
    }
}

/// The archive pass's Redis scripts by name (see `crate::testing`).
#[cfg(feature = "testing")]
pub(crate) fn lua_scripts() -> Vec<(&'static str, &'static redis::Script)> {
    vec![("archive/move_task", &pass::MOVE_TASK), ("archive/mark_feed", &pass::MARK_FEED), ("archive/end_turn", &pass::END_TURN)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_score_holds_the_outcome_and_the_end() {
        for status in [TaskStatus::Succeeded, TaskStatus::Failed, TaskStatus::Cancelled] {
            let score = archived_score(1_764_000_000_123, status).expect("ended");
            assert_eq!(archived_state(score as f64), Some((status, 1_764_000_000_123)));
        }
        assert_eq!(archived_score(5, TaskStatus::Running), None);
    }
}
