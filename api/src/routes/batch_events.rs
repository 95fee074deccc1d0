//! `GET /v1/batches/{id}/events`: every event of a batch's tasks as
//! Server-Sent Events, closing once every task has ended.
//!
//! The same ordering rules as one task's stream, kept per task: the batch
//! channel is subscribed to first, then each task's stored history is
//! replayed (fifty tasks per round trip), then live events follow.
//! An event whose `seq` the client already has is dropped; one that shows a
//! gap makes the feed read that task's history after the last `seq` sent;
//! a broken subscription is renewed and every open task's history re-read.
//! Each task's events arrive in order; events of different tasks interleave.
//! Frames carry `event` (the type) and `data` (the stored JSON, with
//! `task_id` and `seq`), and no `id`: resuming is per task, through
//! `GET /v1/tasks/{id}/events`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use flotilla_shared::event::is_terminal_type;
use flotilla_shared::queue::Queue;
use flotilla_shared::{BatchId, QueueError, TaskId};
use futures::StreamExt;
use redis::aio::PubSubStream;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::batches::BatchIdPath;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// How often an idle stream sends a comment, so proxies keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Events buffered for a client that reads slowly.
const BUFFER: usize = 256;
/// How many tasks' histories one round trip reads.
const REPLAY_CHUNK: usize = 50;
/// How many times a broken subscription is renewed before the feed ends.
const MAX_RESUBSCRIBES: u32 = 8;

/// The fields of a stored event the feed reads.
#[derive(Debug, Deserialize)]
struct Head {
    seq: u64,
    task_id: String,
    #[serde(rename = "type")]
    kind: String,
}

/// Whether to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// Stream the events of every task of a batch.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}/events",
    tag = "batches",
    params(("id" = String, Path, description = "Batch id")),
    responses(
        (status = 200, description = "Server-Sent Events: `event` the type, `data` one Event as JSON; each task's history, then live events; the stream closes once every task has ended", body = String, content_type = "text/event-stream"),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn stream(State(state): State<AppState>, Tenant(tenant): Tenant, BatchIdPath(id): BatchIdPath) -> Result<Response, ApiError> {
    let batch = state.queue().batch(&tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
    let live = subscribe(state.queue(), &batch.id).await?;
    let tasks = state.queue().batch_task_ids(&batch.id).await?;
    let (tx, rx) = mpsc::channel(BUFFER);
    let feed = BatchFeed::new(state.queue().clone(), batch.id, tasks, tx, state.shutdown().clone());
    tokio::spawn(feed.run(live).instrument(tracing::Span::current()));
    let events = ReceiverStream::new(rx).map(Ok::<_, Infallible>);
    let sse = Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE));
    Ok(([("x-accel-buffering", "no")], sse).into_response())
}

async fn subscribe(queue: &Queue, id: &BatchId) -> Result<PubSubStream, QueueError> {
    let mut pubsub = queue.redis().pubsub().await?;
    pubsub.subscribe(queue.keys().batch_channel(id)).await?;
    Ok(pubsub.into_on_message())
}

/// One client's feed of one batch.
struct BatchFeed {
    queue: Queue,
    batch: BatchId,
    tasks: Vec<TaskId>,
    position: HashMap<TaskId, usize>,
    /// Per task, the seq of the last event sent.
    last: Vec<u64>,
    ended: Vec<bool>,
    open: usize,
    out: mpsc::Sender<SseEvent>,
    shutdown: CancellationToken,
}

impl BatchFeed {
    fn new(queue: Queue, batch: BatchId, tasks: Vec<TaskId>, out: mpsc::Sender<SseEvent>, shutdown: CancellationToken) -> Self {
        let position = tasks.iter().enumerate().map(|(i, t)| (t.clone(), i)).collect();
        let n = tasks.len();
        Self { queue, batch, tasks, position, last: vec![0; n], ended: vec![false; n], open: n, out, shutdown }
    }

    async fn run(mut self, live: PubSubStream) {
        let mut live = live;
        match self.catch_up().await {
            Ok(Flow::Continue) => {}
            Ok(Flow::Stop) => return,
            Err(error) => {
                tracing::warn!(batch_id = %self.batch, %error, "replaying the batch's events failed");
                return;
            }
        }
        while self.open > 0 {
            let message = tokio::select! {
                message = live.next() => message,
                () = self.out.closed() => return,
                () = self.shutdown.cancelled() => return,
            };
            let lost = match message {
                None => "the subscription closed".to_owned(),
                Some(message) => match self.on_live(message.get_payload_bytes()).await {
                    Ok(Flow::Continue) => continue,
                    Ok(Flow::Stop) => return,
                    Err(error) => error.to_string(),
                },
            };
            tracing::warn!(batch_id = %self.batch, reason = %lost, "batch feed lost its subscription; resubscribing");
            match self.resubscribe().await {
                Some(renewed) => live = renewed,
                None => return,
            }
        }
    }

    /// Sends what the stored histories of the open tasks hold beyond what
    /// the client has.
    async fn catch_up(&mut self) -> Result<Flow, QueueError> {
        let open: Vec<usize> = (0..self.tasks.len()).filter(|i| !self.ended[*i]).collect();
        for chunk in open.chunks(REPLAY_CHUNK) {
            let ids: Vec<TaskId> = chunk.iter().map(|i| self.tasks[*i].clone()).collect();
            let histories = self.queue.events_of(&ids).await?;
            for (index, history) in chunk.iter().zip(histories) {
                if history.is_empty() {
                    // Expired after its retention: it ended long ago.
                    self.end(*index);
                    continue;
                }
                if self.send_all(*index, &history).await == Flow::Stop {
                    return Ok(Flow::Stop);
                }
            }
        }
        Ok(if self.open == 0 { Flow::Stop } else { Flow::Continue })
    }

    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError> {
        let Some((head, raw)) = parse(payload) else {
            tracing::warn!(batch_id = %self.batch, "unreadable event on the batch channel");
            return Ok(Flow::Continue);
        };
        let Some(index) = TaskId::parse(&head.task_id).ok().and_then(|t| self.position.get(&t).copied()) else {
            return Ok(Flow::Continue);
        };
        if self.ended[index] || head.seq <= self.last[index] {
            return Ok(Flow::Continue);
        }
        if head.seq == self.last[index] + 1 {
            return Ok(self.send(index, &head, raw).await);
        }
        let missed = self.queue.events_after(&self.tasks[index], self.last[index]).await?;
        Ok(self.send_all(index, &missed).await)
    }

    async fn resubscribe(&mut self) -> Option<PubSubStream> {
        let mut delay = Duration::from_millis(100);
        for attempt in 1..=MAX_RESUBSCRIBES {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.out.closed() => return None,
                () = self.shutdown.cancelled() => return None,
            }
            delay = (delay * 2).min(Duration::from_secs(3));
            let renewed = match subscribe(&self.queue, &self.batch).await {
                Ok(live) => live,
                Err(error) => {
                    tracing::warn!(batch_id = %self.batch, attempt, %error, "resubscribing failed");
                    continue;
                }
            };
            match self.catch_up().await {
                Ok(Flow::Continue) => return Some(renewed),
                Ok(Flow::Stop) => return None,
                Err(error) => tracing::warn!(batch_id = %self.batch, attempt, %error, "re-reading histories failed"),
            }
        }
        tracing::warn!(batch_id = %self.batch, "giving up on the batch subscription");
        None
    }

    /// Sends a task's stored events the client does not have yet, in order.
    async fn send_all(&mut self, index: usize, events: &[String]) -> Flow {
        for raw in events {
            let Some((head, raw)) = parse(raw.as_bytes()) else { continue };
            if self.ended[index] || head.seq <= self.last[index] {
                continue;
            }
            if self.send(index, &head, raw).await == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    async fn send(&mut self, index: usize, head: &Head, raw: &str) -> Flow {
        let mut event = SseEvent::default();
        if !head.kind.is_empty() && head.kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            event = event.event(&head.kind);
        }
        if self.out.send(event.data(raw)).await.is_err() {
            return Flow::Stop;
        }
        self.last[index] = head.seq;
        if is_terminal_type(&head.kind) {
            self.end(index);
        }
        if self.open == 0 {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    fn end(&mut self, index: usize) {
        if !self.ended[index] {
            self.ended[index] = true;
            self.open -= 1;
        }
    }
}

fn parse(payload: &[u8]) -> Option<(Head, &str)> {
    let raw = std::str::from_utf8(payload).ok()?;
    let head = serde_json::from_str(raw).ok()?;
    Some((head, raw))
}
