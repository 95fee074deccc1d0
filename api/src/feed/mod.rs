//! Following task events for a Server-Sent Events client: stored history,
//! then the live channel, with no gap and no repeat.
//!
//! Two feeds follow events: [`TaskFeed`] one task's, [`BatchFeed`] every
//! task's of a batch. They share the rules, kept here once. A feed
//! subscribes to its channel *before* reading any history, so an event
//! stored between the two reads arrives on the channel and none is lost; an
//! event that arrives on both is dropped by its task's `seq`. Events are
//! stored before they are published (one script does both), so when a live
//! event shows a gap the feed re-reads that task's history after the last
//! `seq` it sent, and when the subscription breaks (Redis restarted) it
//! subscribes again and re-reads what it may have missed. A feed ends once
//! its tasks have ended, when the client goes away, or when the process
//! shuts down.

mod batch;
mod task;

use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use flotilla_shared::event::is_terminal_type;
use flotilla_shared::queue::Queue;
use flotilla_shared::{QueueError, TaskId};
use futures::StreamExt;
use redis::aio::PubSubStream;
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use batch::BatchFeed;
pub use task::TaskFeed;

/// How many times a broken subscription is re-established before giving up
/// (a task's client can still resume with `Last-Event-ID`).
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

/// What sending a task's events came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    /// The client has gone.
    Gone,
    /// The task's terminal event went out just now.
    Ended,
    /// The task goes on.
    Open,
}

/// The fields of a stored event a feed reads; the rest passes through as is.
#[derive(Debug, Deserialize)]
struct Head {
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
    /// The task it belongs to, which a batch's channel needs to know.
    task_id: Option<String>,
}

fn parse(payload: &[u8]) -> Option<(Head, &str)> {
    let raw = std::str::from_utf8(payload).ok()?;
    let head = serde_json::from_str(raw).ok()?;
    Some((head, raw))
}

/// Whether a frame carries the event's `seq` as its SSE `id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ids {
    /// The client resumes with `Last-Event-ID`.
    Seq,
    /// Resuming is not offered (seqs are per task, so not one order).
    Omitted,
}

/// The SSE frame of a stored event: `id` its seq (when `ids` says so),
/// `event` its type when that is a plain name, `data` the JSON exactly as
/// stored.
fn frame(head: &Head, raw: &str, ids: Ids) -> SseEvent {
    let mut event = SseEvent::default();
    if ids == Ids::Seq {
        event = event.id(head.seq.to_string());
    }
    if !head.kind.is_empty() && head.kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        event = event.event(&head.kind);
    }
    event.data(raw)
}

/// Subscribes to `channel`.
async fn listen(queue: &Queue, channel: String) -> Result<PubSubStream, QueueError> {
    let mut pubsub = queue.redis().pubsub().await?;
    pubsub.subscribe(channel).await?;
    Ok(pubsub.into_on_message())
}

/// How far one task's events have gone to the client.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    /// The seq of the last event the client has.
    last: u64,
    /// Its terminal event has been sent, or it ended long ago.
    ended: bool,
}

impl Cursor {
    fn after(last: u64) -> Self {
        Self { last, ended: false }
    }

    /// Whether the client still lacks the event `seq`.
    fn wants(&self, seq: u64) -> bool {
        !self.ended && seq > self.last
    }

    /// Whether `seq` comes right after what the client has.
    fn is_next(&self, seq: u64) -> bool {
        self.last.checked_add(1) == Some(seq)
    }
}

/// One SSE client: where frames go, how they look, and what ends the feed
/// early.
struct Client {
    out: mpsc::Sender<SseEvent>,
    shutdown: CancellationToken,
    ids: Ids,
    /// What is followed, for logs ("task tsk_…", "batch bat_…").
    label: String,
}

impl Client {
    /// Resolves once the client has gone or the process is shutting down.
    async fn gone(&self) {
        tokio::select! {
            () = self.out.closed() => {}
            () = self.shutdown.cancelled() => {}
        }
    }

    /// Waits `delay`, or stops early if the client goes.
    async fn pause(&self, delay: Duration) -> Flow {
        tokio::select! {
            () = tokio::time::sleep(delay) => Flow::Continue,
            () = self.gone() => Flow::Stop,
        }
    }

    /// Reads a message from the channel; `None`, logged, when unreadable.
    fn read_live<'a>(&self, payload: &'a [u8]) -> Option<(Head, &'a str)> {
        let parsed = parse(payload);
        if parsed.is_none() {
            tracing::warn!(feed = %self.label, "unreadable event on the channel");
        }
        parsed
    }

    /// Passes on one live event of `task`: dropped if the client has it,
    /// sent if it is the next, else the history after the gap is read and
    /// sent instead.
    async fn deliver(
        &self,
        queue: &Queue,
        task: &TaskId,
        cursor: &mut Cursor,
        head: &Head,
        raw: &str,
    ) -> Result<Sent, QueueError> {
        if !cursor.wants(head.seq) {
            return Ok(Sent::Open);
        }
        if cursor.is_next(head.seq) {
            return Ok(self.send(cursor, head, raw).await);
        }
        let missed = queue.events_after(task, cursor.last).await?;
        Ok(self.send_all(cursor, &missed).await)
    }

    /// Sends the stored events of one task the client does not have yet, in order.
    async fn send_all(&self, cursor: &mut Cursor, events: &[String]) -> Sent {
        for raw in events {
            let Some((head, raw)) = parse(raw.as_bytes()) else {
                tracing::warn!(feed = %self.label, "unreadable stored event skipped");
                continue;
            };
            if !cursor.wants(head.seq) {
                continue;
            }
            match self.send(cursor, &head, raw).await {
                Sent::Open => {}
                done => return done,
            }
        }
        Sent::Open
    }

    async fn send(&self, cursor: &mut Cursor, head: &Head, raw: &str) -> Sent {
        if self.out.send(frame(head, raw, self.ids)).await.is_err() {
            return Sent::Gone;
        }
        cursor.last = head.seq;
        if is_terminal_type(&head.kind) {
            cursor.ended = true;
            Sent::Ended
        } else {
            Sent::Open
        }
    }
}

/// A feed the follow loop drives once its history is sent.
trait Follow {
    fn client(&self) -> &Client;

    /// Every event the feed owes its client has been sent.
    fn is_done(&self) -> bool;

    /// Handles one message from the channel; an error means the
    /// subscription can no longer be trusted.
    async fn on_live(&mut self, payload: &[u8]) -> Result<Flow, QueueError>;

    /// Subscribes again and sends what was missed meanwhile.
    async fn resume(&mut self) -> Result<(PubSubStream, Flow), QueueError>;
}

/// Follows `live` until the feed is done, the client goes or the process
/// shuts down, renewing the subscription when it breaks.
async fn follow<F: Follow>(feed: &mut F, mut live: PubSubStream) {
    while !feed.is_done() {
        let message = tokio::select! {
            message = live.next() => message,
            () = feed.client().gone() => return,
        };
        let lost = match message {
            None => "the subscription closed".to_owned(),
            Some(message) => match feed.on_live(message.get_payload_bytes()).await {
                Ok(Flow::Continue) => continue,
                Ok(Flow::Stop) => return,
                Err(error) => error.to_string(),
            },
        };
        tracing::warn!(feed = %feed.client().label, reason = %lost, "event feed lost its subscription; resubscribing");
        match resubscribe(feed).await {
            Some(renewed) => live = renewed,
            None => return,
        }
    }
}

/// Subscribes again, backing off between tries; `None` ends the feed.
async fn resubscribe<F: Follow>(feed: &mut F) -> Option<PubSubStream> {
    let mut delay = RESUBSCRIBE_BASE_DELAY;
    for attempt in 1..=MAX_RESUBSCRIBES {
        if feed.client().pause(delay).await == Flow::Stop {
            return None;
        }
        delay = (delay * 2).min(RESUBSCRIBE_MAX_DELAY);
        match feed.resume().await {
            Ok((live, Flow::Continue)) => return Some(live),
            Ok((_, Flow::Stop)) => return None,
            Err(error) => tracing::warn!(feed = %feed.client().label, attempt, %error, "resubscribing failed"),
        }
    }
    tracing::warn!(feed = %feed.client().label, "giving up on the event subscription");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes an SSE response sends for `event`.
    async fn bytes_of(event: SseEvent) -> String {
        use axum::response::IntoResponse;
        use http_body_util::BodyExt;
        let sse = axum::response::sse::Sse::new(futures::stream::iter([Ok::<_, std::convert::Infallible>(event)]));
        let bytes = sse.into_response().into_body().collect().await.expect("body").to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    const REASONING: &str = r#"{"seq":3,"task_id":"tsk_x","type":"reasoning","text":"a\nb"}"#;

    #[tokio::test]
    async fn a_task_frame_carries_seq_type_and_the_stored_json() {
        let (head, raw) = parse(REASONING.as_bytes()).expect("parses");
        assert_eq!(bytes_of(frame(&head, raw, Ids::Seq)).await, format!("id: 3\nevent: reasoning\ndata: {raw}\n\n"));
    }

    #[tokio::test]
    async fn a_batch_frame_carries_type_and_the_stored_json_but_no_id() {
        let (head, raw) = parse(REASONING.as_bytes()).expect("parses");
        assert_eq!(bytes_of(frame(&head, raw, Ids::Omitted)).await, format!("event: reasoning\ndata: {raw}\n\n"));
    }

    #[tokio::test]
    async fn a_strange_type_is_not_used_as_an_event_name() {
        let (head, raw) = parse(br#"{"seq":1,"type":"a b"}"#).expect("parses");
        assert!(!bytes_of(frame(&head, raw, Ids::Seq)).await.contains("event:"));
    }

    #[test]
    fn events_without_seq_are_unreadable() {
        assert!(parse(br#"{"type":"queued"}"#).is_none());
        assert!(parse(b"\xff").is_none());
    }

    #[test]
    fn a_cursor_wants_only_later_events_of_an_open_task() {
        let mut cursor = Cursor::after(2);
        assert!(!cursor.wants(2));
        assert!(cursor.wants(3) && cursor.is_next(3) && !cursor.is_next(4));
        cursor.ended = true;
        assert!(!cursor.wants(3));
        assert!(!Cursor::after(u64::MAX).is_next(0));
    }
}
