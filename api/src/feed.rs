//! Following one task's events for a Server-Sent Events client: its stored
//! history, then its live channel, with no gap and no repeat.
//!
//! The caller subscribes to the task's channel *before* reading the history,
//! so an event stored between the two reads arrives on the channel and none
//! is lost; an event that arrives on both is dropped by its `seq`. Events are
//! stored before they are published (one script does both), so when a live
//! event shows a gap, or the subscription breaks (Redis restarted), the feed
//! re-reads the history after the last `seq` it sent and carries on. The
//! feed ends right after a terminal event, when the client goes away, or when
//! the process shuts down.

use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use flotilla_shared::event::is_terminal_type;
use flotilla_shared::queue::Queue;
use flotilla_shared::{QueueError, TaskId, TenantId};
use futures::StreamExt;
use redis::aio::PubSubStream;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// How many times a broken subscription is re-established before giving up
/// (the client can still resume with `Last-Event-ID`).
const MAX_RESUBSCRIBES: u32 = 8;
/// The first wait before re-subscribing; it doubles up to [`RESUBSCRIBE_MAX_DELAY`].
const RESUBSCRIBE_BASE_DELAY: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX_DELAY: Duration = Duration::from_secs(3);

/// Whether to go on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Continue,
    Stop,
}

/// The fields of a stored event the feed reads; the rest passes through as is.
#[derive(Debug, Deserialize)]
struct Head {
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
}

/// Subscribes to the live events of task `id`.
pub async fn subscribe(queue: &Queue, id: &TaskId) -> Result<PubSubStream, QueueError> {
    let mut pubsub = queue.redis().pubsub().await?;
    pubsub.subscribe(queue.keys().task_channel(id)).await?;
    Ok(pubsub.into_on_message())
}

/// One client's feed of one task.
pub struct Feed {
    queue: Queue,
    tenant: TenantId,
    id: TaskId,
    /// The seq of the last event the client has.
    last: u64,
    out: mpsc::Sender<SseEvent>,
    shutdown: CancellationToken,
}

impl Feed {
    /// A feed for a client that has every event up to `after`.
    pub fn new(
        queue: Queue,
        tenant: TenantId,
        id: TaskId,
        after: u64,
        out: mpsc::Sender<SseEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        Self { queue, tenant, id, last: after, out, shutdown }
    }

    /// Sends `history` (read after subscribing to `live`), then follows
    /// `live`. `finished` says the task had ended before the history was read,
    /// so its terminal event is in the history or already with the client.
    pub async fn run(mut self, live: PubSubStream, history: Vec<String>, finished: bool) {
        if self.send_all(&history).await == Flow::Stop || finished {
            return;
        }
        let mut live = live;
        loop {
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
            tracing::warn!(task_id = %self.id, reason = %lost, "event feed lost its subscription; resubscribing");
            match self.resubscribe().await {
                Some(renewed) => live = renewed,
                None => return,
            }
        }
    }

    /// Handles one message from the channel.
    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError> {
        let Some((head, raw)) = parse(payload) else {
            tracing::warn!(task_id = %self.id, "unreadable event on the task channel");
            return Ok(Flow::Continue);
        };
        if head.seq <= self.last {
            return Ok(Flow::Continue);
        }
        if head.seq == self.last + 1 {
            return Ok(self.send(&head, raw).await);
        }
        let missed = self.queue.events_after(&self.id, self.last).await?;
        Ok(self.send_all(&missed).await)
    }

    /// Subscribes again and sends what was missed meanwhile; `None` ends the feed.
    async fn resubscribe(&mut self) -> Option<PubSubStream> {
        let mut delay = RESUBSCRIBE_BASE_DELAY;
        for attempt in 1..=MAX_RESUBSCRIBES {
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = self.out.closed() => return None,
                () = self.shutdown.cancelled() => return None,
            }
            delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
            match self.resume().await {
                Ok((live, Flow::Continue)) => return Some(live),
                Ok((_, Flow::Stop)) => return None,
                Err(error) => tracing::warn!(task_id = %self.id, attempt, %error, "resubscribing failed"),
            }
        }
        tracing::warn!(task_id = %self.id, "giving up on the event subscription");
        None
    }

    async fn resume(&mut self) -> Result<(PubSubStream, Flow), QueueError> {
        let live = subscribe(&self.queue, &self.id).await?;
        let Some(task) = self.queue.get(&self.tenant, &self.id).await? else {
            return Ok((live, Flow::Stop));
        };
        let missed = self.queue.events_after(&self.id, self.last).await?;
        let flow = match self.send_all(&missed).await {
            Flow::Continue if task.status.is_terminal() => Flow::Stop,
            flow => flow,
        };
        Ok((live, flow))
    }

    /// Sends the stored events the client does not have yet, in order.
    async fn send_all(&mut self, events: &[String]) -> Flow {
        for raw in events {
            let Some((head, raw)) = parse(raw.as_bytes()) else {
                tracing::warn!(task_id = %self.id, "unreadable stored event skipped");
                continue;
            };
            if head.seq <= self.last {
                continue;
            }
            if self.send(&head, raw).await == Flow::Stop {
                return Flow::Stop;
            }
        }
        Flow::Continue
    }

    async fn send(&mut self, head: &Head, raw: &str) -> Flow {
        if self.out.send(sse_event(head, raw)).await.is_err() {
            return Flow::Stop;
        }
        self.last = head.seq;
        if is_terminal_type(&head.kind) {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }
}

fn parse(payload: &[u8]) -> Option<(Head, &str)> {
    let raw = std::str::from_utf8(payload).ok()?;
    let head = serde_json::from_str(raw).ok()?;
    Some((head, raw))
}

/// The SSE frame of a stored event: `id` its seq, `event` its type, `data`
/// the JSON exactly as stored.
fn sse_event(head: &Head, raw: &str) -> SseEvent {
    let mut event = SseEvent::default().id(head.seq.to_string());
    if !head.kind.is_empty() && head.kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        event = event.event(&head.kind);
    }
    event.data(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes an SSE response sends for `event`.
    async fn frame(event: SseEvent) -> String {
        use axum::response::IntoResponse;
        use http_body_util::BodyExt;
        let sse = axum::response::sse::Sse::new(futures::stream::iter([Ok::<_, std::convert::Infallible>(event)]));
        let bytes = sse.into_response().into_body().collect().await.expect("body").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn an_event_frame_carries_seq_type_and_the_stored_json() {
        let raw = r#"{"seq":3,"task_id":"tsk_x","type":"reasoning","text":"a\nb"}"#;
        let (head, raw) = parse(raw.as_bytes()).expect("parses");
        assert_eq!(frame(sse_event(&head, raw)).await, format!("id: 3\nevent: reasoning\ndata: {raw}\n\n"));
    }

    #[tokio::test]
    async fn a_strange_type_is_not_used_as_an_event_name() {
        let (head, raw) = parse(br#"{"seq":1,"type":"a b"}"#).expect("parses");
        assert!(!frame(sse_event(&head, raw)).await.contains("event:"));
    }

    #[test]
    fn events_without_seq_are_unreadable() {
        assert!(parse(br#"{"type":"queued"}"#).is_none());
        assert!(parse(b"\xff").is_none());
    }
}
