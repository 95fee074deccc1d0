//! One task's feed: the history after what the client has (its
//! `Last-Event-ID`), then the task's channel, until the terminal event.
//!
//! Frames carry `id` (the seq), so a client that loses the stream resumes
//! where it stopped. When the subscription breaks, the task itself is read
//! again too: a task gone (expired) or ended by then ends the feed once its
//! missed events are out.

use axum::response::sse::Event as SseEvent;
use flotilla_shared::queue::Queue;
use flotilla_shared::{QueueError, TaskId, TenantId};
use redis::aio::PubSubStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{follow, listen, Client, Cursor, Flow, Follow, Ids, Sent};

/// One client's feed of one task.
pub struct TaskFeed {
    queue: Queue,
    tenant: TenantId,
    id: TaskId,
    cursor: Cursor,
    client: Client,
}

impl TaskFeed {
    /// Subscribes to the live events of task `id`.
    pub async fn subscribe(queue: &Queue, id: &TaskId) -> Result<PubSubStream, QueueError> {
        listen(queue, queue.keys().task_channel(id)).await
    }

    /// A feed for a client that has every event up to `after`.
    pub fn new(
        queue: Queue,
        tenant: TenantId,
        id: TaskId,
        after: u64,
        out: mpsc::Sender<SseEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        let client = Client { out, shutdown, ids: Ids::Seq, label: format!("task {id}") };
        Self { queue, tenant, id, cursor: Cursor::after(after), client }
    }

    /// Sends `history` (read after subscribing to `live`), then follows
    /// `live`. `finished` says the task had ended before the history was read,
    /// so its terminal event is in the history or already with the client.
    pub async fn run(mut self, live: PubSubStream, history: Vec<String>, finished: bool) {
        let sent = self.client.send_all(&mut self.cursor, &history).await;
        if settle(sent) == Flow::Stop || finished {
            return;
        }
        follow(&mut self, live).await;
    }
}

impl Follow for TaskFeed {
    fn client(&self) -> &Client {
        &self.client
    }

    fn is_done(&self) -> bool {
        self.cursor.ended
    }

    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError> {
        let Some((head, raw)) = self.client.read_live(payload) else {
            return Ok(Flow::Continue);
        };
        let sent = self.client.deliver(&self.queue, &self.id, &mut self.cursor, &head, raw).await?;
        Ok(settle(sent))
    }

    async fn resume(&mut self) -> Result<(PubSubStream, Flow), QueueError> {
        let live = Self::subscribe(&self.queue, &self.id).await?;
        let Some(task) = self.queue.get(&self.tenant, &self.id).await? else {
            return Ok((live, Flow::Stop));
        };
        let missed = self.queue.events_after(&self.id, self.cursor.last).await?;
        let flow = settle(self.client.send_all(&mut self.cursor, &missed).await);
        Ok((live, if task.status.is_terminal() { Flow::Stop } else { flow }))
    }
}

/// A task's feed ends with its terminal event, or when its client goes.
fn settle(sent: Sent) -> Flow {
    match sent {
        Sent::Open => Flow::Continue,
        Sent::Gone | Sent::Ended => Flow::Stop,
    }
}
