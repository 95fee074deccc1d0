//! A tenant's feed (`GET /v1/events`) and the loop it shares with a batch's
//! feed: the stored feed after the client's position, then the shared
//! reader's entries, each sent once, in the order of the tenant's feed
//! stream, with its position as the frame's `id`.

use flotilla_queue::queue::{FeedId, Queue, FEED_READ};
use flotilla_queue::QueueError;
use flotilla_types::TenantId;

use super::tail::{TailSub, Tailed};
use super::{parse, Client, Flow, Head, Recover};

/// Which of a tenant's events a feed passes on, and when it is over.
pub trait Scope {
    /// Whether the client wants this event.
    fn wants(&self, head: &Head) -> bool;

    /// Notes an event sent; a terminal one may end the feed.
    fn sent(&mut self, head: &Head);

    /// Whether every event the feed owes has been sent.
    fn is_done(&self) -> bool;
}

impl<S: Scope> Recover for TenantFeed<S> {
    fn client(&self) -> &Client {
        &self.client
    }

    async fn reread(&mut self) -> Result<Flow, QueueError> {
        self.catch_up().await
    }
}

/// Every event of the tenant; never done.
pub struct Everything;

impl Scope for Everything {
    fn wants(&self, _: &Head) -> bool {
        true
    }

    fn sent(&mut self, _: &Head) {}

    fn is_done(&self) -> bool {
        false
    }
}

/// One client's feed of one tenant's events (or some of them).
pub struct TenantFeed<S = Everything> {
    queue: Queue,
    tenant: TenantId,
    /// The position of the last entry the client has.
    cursor: FeedId,
    scope: S,
    client: Client,
}

impl TenantFeed<Everything> {
    /// A feed of everything after `cursor`.
    pub fn new(queue: Queue, tenant: TenantId, cursor: FeedId, client: Client) -> Self {
        Self::scoped(queue, tenant, cursor, Everything, client)
    }
}

impl<S: Scope> TenantFeed<S> {
    pub(super) fn scoped(queue: Queue, tenant: TenantId, cursor: FeedId, scope: S, client: Client) -> Self {
        Self { queue, tenant, cursor, scope, client }
    }

    /// Sends the stored feed after the cursor (read after `live` started),
    /// then follows `live` until the scope is done. Done is checked only
    /// between entries read live and after a whole catch-up, never halfway
    /// through one: what is stored up to the present is always sent.
    pub async fn run(mut self, mut live: TailSub) {
        let mut flow = self.catch_up_or_recover().await;
        while flow == Flow::Continue && !self.scope.is_done() {
            let message = tokio::select! {
                message = live.recv() => message,
                () = self.client.gone() => return,
            };
            flow = match message {
                None => return,
                Some(Tailed::Entry(entry)) => self.pass(entry.id, &entry.event).await,
                Some(Tailed::Resync) => self.catch_up_or_recover().await,
            };
        }
    }

    async fn catch_up_or_recover(&mut self) -> Flow {
        match self.catch_up().await {
            Ok(flow) => flow,
            Err(error) => Client::recover(self, error).await,
        }
    }

    /// Sends everything stored after the cursor.
    async fn catch_up(&mut self) -> Result<Flow, QueueError> {
        loop {
            let entries = self.queue.reader().feed_after(&self.tenant, self.cursor).await?;
            let full = entries.len() >= FEED_READ;
            for entry in entries {
                if self.pass(entry.id, &entry.event).await == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
            if !full {
                return Ok(Flow::Continue);
            }
        }
    }

    /// Sends the entry at `id` if the client lacks it and wants it.
    async fn pass(&mut self, id: FeedId, event: &str) -> Flow {
        if id <= self.cursor {
            return Flow::Continue;
        }
        self.cursor = id;
        let Some((head, raw)) = parse(event.as_bytes()) else {
            tracing::warn!(feed = %self.client.label, "unreadable feed entry skipped");
            return Flow::Continue;
        };
        if !self.scope.wants(&head) {
            return Flow::Continue;
        }
        if self.client.send_at(id, &head, raw).await == Flow::Stop {
            return Flow::Stop;
        }
        self.scope.sent(&head);
        Flow::Continue
    }
}
