//! A batch's feed: every event of the batch's tasks, closing once every
//! task has ended.
//!
//! The feed rules hold per task: the batch channel is subscribed to first,
//! then each task's stored history is replayed (fifty tasks per round trip),
//! then live events follow, each routed to its task by `task_id` and checked
//! against that task's `seq`. A broken subscription is renewed and every
//! open task's history re-read. Each task's events arrive in order; events
//! of different tasks interleave, so frames carry no `id`: resuming is per
//! task, through `GET /v1/tasks/{id}/events`.

use std::collections::HashMap;

use axum::response::sse::Event as SseEvent;
use flotilla_shared::queue::Queue;
use flotilla_shared::{BatchId, QueueError, TaskId};
use redis::aio::PubSubStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{follow, listen, Client, Cursor, Flow, Follow, Head, Ids, Sent};

/// How many tasks' histories one round trip reads.
const REPLAY_CHUNK: usize = 50;

/// One client's feed of one batch.
pub struct BatchFeed {
    queue: Queue,
    batch: BatchId,
    tasks: Vec<TaskId>,
    position: HashMap<TaskId, usize>,
    /// Per task (as in `tasks`), what the client has.
    cursors: Vec<Cursor>,
    /// How many tasks have not ended.
    open: usize,
    client: Client,
}

impl BatchFeed {
    /// Subscribes to the live events of every task of batch `id`.
    pub async fn subscribe(queue: &Queue, id: &BatchId) -> Result<PubSubStream, QueueError> {
        listen(queue, queue.keys().batch_channel(id)).await
    }

    /// A feed of `tasks`, the tasks of `batch`, for a client that has none
    /// of their events.
    pub fn new(
        queue: Queue,
        batch: BatchId,
        tasks: Vec<TaskId>,
        out: mpsc::Sender<SseEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        let position = tasks.iter().enumerate().map(|(i, t)| (t.clone(), i)).collect();
        let open = tasks.len();
        let client = Client { out, shutdown, ids: Ids::Omitted, label: format!("batch {batch}") };
        Self { queue, batch, cursors: vec![Cursor::default(); open], tasks, position, open, client }
    }

    /// Replays the histories (read after subscribing to `live`), then
    /// follows `live`.
    pub async fn run(mut self, live: PubSubStream) {
        match self.catch_up().await {
            Ok(Flow::Continue) => follow(&mut self, live).await,
            Ok(Flow::Stop) => {}
            Err(error) => tracing::warn!(feed = %self.client.label, %error, "replaying the batch's events failed"),
        }
    }

    /// Sends what the stored histories of the open tasks hold beyond what
    /// the client has.
    async fn catch_up(&mut self) -> Result<Flow, QueueError> {
        let open: Vec<usize> = (0..self.tasks.len()).filter(|i| !self.cursors[*i].ended).collect();
        for chunk in open.chunks(REPLAY_CHUNK) {
            if self.replay(chunk).await? == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(if self.is_done() { Flow::Stop } else { Flow::Continue })
    }

    /// Sends the histories of the tasks at `chunk`, read in one round trip.
    async fn replay(&mut self, chunk: &[usize]) -> Result<Flow, QueueError> {
        let ids: Vec<TaskId> = chunk.iter().map(|i| self.tasks[*i].clone()).collect();
        let histories = self.queue.events_of(&ids).await?;
        for (&index, history) in chunk.iter().zip(histories) {
            let sent = if history.is_empty() {
                // Expired after its retention: it ended long ago.
                self.cursors[index].ended = true;
                Sent::Ended
            } else {
                self.client.send_all(&mut self.cursors[index], &history).await
            };
            if self.settle(sent) == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        Ok(Flow::Continue)
    }

    /// The index of the task an event belongs to, if it is one of the batch's.
    fn index_of(&self, head: &Head) -> Option<usize> {
        let task = TaskId::parse(head.task_id.as_deref()?).ok()?;
        self.position.get(&task).copied()
    }

    /// Counts a task that has just ended; the feed ends with the last one,
    /// or when its client goes.
    fn settle(&mut self, sent: Sent) -> Flow {
        match sent {
            Sent::Gone => return Flow::Stop,
            Sent::Ended => self.open = self.open.saturating_sub(1),
            Sent::Open => {}
        }
        if self.is_done() {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

impl Follow for BatchFeed {
    fn client(&self) -> &Client {
        &self.client
    }

    fn is_done(&self) -> bool {
        self.open == 0
    }

    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError> {
        let Some((head, raw)) = self.client.read_live(payload) else {
            return Ok(Flow::Continue);
        };
        let Some(index) = self.index_of(&head) else {
            return Ok(Flow::Continue);
        };
        let sent = self.client.deliver(&self.queue, &self.tasks[index], &mut self.cursors[index], &head, raw).await?;
        Ok(self.settle(sent))
    }

    async fn resume(&mut self) -> Result<(PubSubStream, Flow), QueueError> {
        let live = Self::subscribe(&self.queue, &self.batch).await?;
        let flow = self.catch_up().await?;
        Ok((live, flow))
    }
}
