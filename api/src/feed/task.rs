//! One task's feed: the history after what the client has (its
//! `Last-Event-ID`), then the task's live events, until the terminal event.
//!
//! Frames carry `id` (the seq), so a client that loses the stream resumes
//! where it stopped. When events may have been missed, the task itself is
//! read again too: a task gone (expired) or ended by then ends the feed
//! once its missed events are out.

use flotilla_queue::queue::Queue;
use flotilla_queue::QueueError;
use flotilla_types::{TaskId, TenantId};

use super::{Client, Cursor, Flow, Recover, Sent};
use crate::hub::{Live, Subscription};

/// One client's feed of one task.
pub struct TaskFeed {
    queue: Queue,
    tenant: TenantId,
    id: TaskId,
    cursor: Cursor,
    client: Client,
}

impl TaskFeed {
    /// A feed for a client that has every event up to `after`.
    pub fn new(queue: Queue, tenant: TenantId, id: TaskId, after: u64, client: Client) -> Self {
        Self { queue, tenant, id, cursor: Cursor::after(after), client }
    }

    /// Sends `history` (read after subscribing to `live`), then follows
    /// `live`. `finished` says the task had ended before the history was read,
    /// so its terminal event is in the history or already with the client.
    pub async fn run(mut self, mut live: Subscription, history: Vec<String>, finished: bool) {
        let sent = self.client.send_all(&mut self.cursor, &history).await;
        if settle(sent) == Flow::Stop || finished {
            return;
        }
        while !self.cursor.ended {
            let message = tokio::select! {
                message = live.recv() => message,
                () = self.client.gone() => return,
            };
            let flow = match message {
                None => return,
                Some(Live::Event(raw)) => self.on_live(raw.as_bytes()).await,
                Some(Live::Resync) => self.resume().await,
            };
            let flow = match flow {
                Ok(flow) => flow,
                Err(error) => Client::recover(&mut self, error).await,
            };
            if flow == Flow::Stop {
                return;
            }
        }
    }

    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError> {
        let Some((head, raw)) = self.client.read_live(payload) else {
            return Ok(Flow::Continue);
        };
        let sent = self.client.deliver(&self.queue, &self.tenant, &self.id, &mut self.cursor, &head, raw).await?;
        Ok(settle(sent))
    }

    /// Sends what was missed, and stops if the task is gone or has ended.
    async fn resume(&mut self) -> Result<Flow, QueueError> {
        let Some(task) = self.queue.reader().get(&self.tenant, &self.id).await? else {
            return Ok(Flow::Stop);
        };
        let missed = self.queue.reader().events_after(&self.tenant, &self.id, self.cursor.last).await?;
        let flow = settle(self.client.send_all(&mut self.cursor, &missed).await);
        Ok(if task.status.is_terminal() { Flow::Stop } else { flow })
    }
}

impl Recover for TaskFeed {
    fn client(&self) -> &Client {
        &self.client
    }

    async fn reread(&mut self) -> Result<Flow, QueueError> {
        self.resume().await
    }
}

/// A task's feed ends with its terminal event, or when its client goes.
fn settle(sent: Sent) -> Flow {
    match sent {
        Sent::Open => Flow::Continue,
        Sent::Gone | Sent::Ended => Flow::Stop,
    }
}
