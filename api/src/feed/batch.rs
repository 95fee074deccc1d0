//! A batch's feed: every event of the batch's tasks, taken from its
//! tenant's feed, closing once every task has ended.
//!
//! Frames carry the tenant feed's position as `id`, so a client resumes
//! with `Last-Event-ID` like on `GET /v1/events`. Without one the feed
//! starts a minute before the batch was created (room for clocks that
//! disagree), which holds every event of its tasks.
//!
//! Ending: the tasks still open are read *before* the feed is read, so a
//! task that ended before then has its terminal event in what the feed
//! reads (or the client had it), and each other task's terminal event
//! comes later; the feed closes when the last open task's terminal event
//! has gone out.

use std::collections::HashSet;

use flotilla_queue::queue::{BatchRecord, FeedId, Queue};
use flotilla_queue::QueueError;
use flotilla_types::{BatchId, TaskId};

use super::tenant::{Scope, TenantFeed};
use super::{Client, Head};
use crate::feed::tail::TailSub;

/// How far before its creation a batch's feed starts, for clock skew.
const CREATION_MARGIN_MS: u64 = 60_000;

/// The events of one batch, until its open tasks have ended.
pub struct BatchScope {
    batch: String,
    open: HashSet<String>,
}

impl Scope for BatchScope {
    fn wants(&self, head: &Head) -> bool {
        head.batch_id.as_deref() == Some(self.batch.as_str())
    }

    fn sent(&mut self, head: &Head) {
        if flotilla_types::event::is_terminal_type(&head.kind) {
            if let Some(task) = &head.task_id {
                self.open.remove(task);
            }
        }
    }

    fn is_done(&self) -> bool {
        self.open.is_empty()
    }
}

/// One client's feed of one batch.
pub struct BatchFeed {
    feed: TenantFeed<BatchScope>,
}

impl BatchFeed {
    /// A feed of `batch` after `cursor` (or from its start); reads which of
    /// its tasks are still open, so call it before reading the feed.
    pub async fn prepare(queue: Queue, batch: &BatchRecord, cursor: Option<FeedId>, client: Client) -> Result<Self, QueueError> {
        let tasks = queue.reader().batch_task_ids(&batch.id).await?;
        let states = queue.reader().task_states(&batch.tenant, &tasks).await?;
        let open = tasks
            .iter()
            .zip(states)
            .filter(|(_, state)| state.is_some_and(|(status, _)| !status.is_terminal()))
            .map(|(id, _): (&TaskId, _)| id.to_string())
            .collect();
        let start = FeedId::at_ms((batch.created_at_ms.max(0) as u64).saturating_sub(CREATION_MARGIN_MS));
        let scope = BatchScope { batch: batch_key(&batch.id), open };
        Ok(Self { feed: TenantFeed::scoped(queue, batch.tenant.clone(), cursor.unwrap_or(start), scope, client) })
    }

    /// Sends the batch's stored events after the cursor, then follows `live`.
    pub async fn run(self, live: TailSub) {
        self.feed.run(live).await;
    }
}

fn batch_key(id: &BatchId) -> String {
    id.to_string()
}
