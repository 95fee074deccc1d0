//! Following events for a Server-Sent Events client: stored history, then
//! live events from the [`crate::hub`], with no gap and no repeat.
//!
//! Three feeds: [`TaskFeed`] one task's events, ordered by the task's `seq`;
//! [`TenantFeed`] every event of a tenant and [`BatchFeed`] every event of a
//! batch's tasks, both ordered by the tenant's feed stream (its entry id is
//! the frame's `id`), read through one shared [`tail::Tails`] reader per
//! tenant. Every feed subscribes *before* reading history, so an event
//! stored between the two arrives live and none is lost; an event that
//! arrives both ways is dropped by its position. When the hub says events
//! may have been missed ([`crate::hub::Live::Resync`]), the feed re-reads
//! history after the last position it sent. A feed ends once what it
//! follows has ended, when the client goes away, when its stream reaches
//! its maximum lifetime (the client resumes with `Last-Event-ID`), or when
//! the process shuts down.

mod batch;
mod relay;
mod tail;
mod task;
mod tenant;

use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use flotilla_queue::queue::{FeedId, Queue};
use flotilla_queue::QueueError;
use flotilla_types::event::is_terminal_type;
use flotilla_types::{TaskId, TenantId};
use serde::Deserialize;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

pub use batch::BatchFeed;
pub use relay::RelayFeed;
pub use tail::Tails;
pub use task::TaskFeed;
pub use tenant::TenantFeed;

/// How many times a feed retries reading history after a failed read
/// (Redis restarting) before it ends the stream; the client can resume.
const MAX_RETRIES: u32 = 8;
/// The first wait before retrying; it doubles up to [`RETRY_MAX_DELAY`].
const RETRY_BASE_DELAY: Duration = Duration::from_millis(100);
const RETRY_MAX_DELAY: Duration = Duration::from_secs(3);

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
pub struct Head {
    seq: u64,
    #[serde(rename = "type")]
    kind: String,
    /// The task it belongs to.
    task_id: Option<String>,
    /// The batch of its task, if any.
    batch_id: Option<String>,
}

fn parse(payload: &[u8]) -> Option<(Head, &str)> {
    let raw = std::str::from_utf8(payload).ok()?;
    let head = serde_json::from_str(raw).ok()?;
    Some((head, raw))
}

/// The SSE frame of a stored event: `id` the given position, `event` its
/// type when that is a plain name, `data` the JSON exactly as stored.
fn frame(head: &Head, raw: &str, id: String) -> SseEvent {
    let mut event = SseEvent::default().id(id);
    if !head.kind.is_empty() && head.kind.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        event = event.event(&head.kind);
    }
    event.data(raw)
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

/// A feed that can read again what it may have missed.
trait Recover {
    fn client(&self) -> &Client;

    /// Sends what is stored after what the client has.
    async fn reread(&mut self) -> Result<Flow, QueueError>;
}

/// One SSE client: where frames go, and what ends the feed early.
pub struct Client {
    out: mpsc::Sender<SseEvent>,
    shutdown: CancellationToken,
    /// When the stream reaches its maximum lifetime.
    expires: Instant,
    /// What is followed, for logs ("task tsk_…", "batch bat_…").
    label: String,
}

impl Client {
    pub fn new(out: mpsc::Sender<SseEvent>, shutdown: CancellationToken, expires: Instant, label: String) -> Self {
        Self { out, shutdown, expires, label }
    }

    /// Resolves once the client has gone, the stream has lived its
    /// lifetime, or the process is shutting down.
    async fn gone(&self) {
        tokio::select! {
            () = self.out.closed() => {}
            () = self.shutdown.cancelled() => {}
            () = tokio::time::sleep_until(self.expires) => {}
        }
    }

    /// Waits `delay`, or stops early if the client goes.
    async fn pause(&self, delay: Duration) -> Flow {
        tokio::select! {
            () = tokio::time::sleep(delay) => Flow::Continue,
            () = self.gone() => Flow::Stop,
        }
    }

    /// After a failed read, waits and tries `reread` again, backing off;
    /// gives up (ends the feed) after [`MAX_RETRIES`].
    async fn recover<F: Recover>(feed: &mut F, error: QueueError) -> Flow {
        tracing::warn!(feed = %feed.client().label, %error, "reading events failed; retrying");
        let mut delay = RETRY_BASE_DELAY;
        for attempt in 1..=MAX_RETRIES {
            if feed.client().pause(delay).await == Flow::Stop {
                return Flow::Stop;
            }
            delay = (delay * 2).min(RETRY_MAX_DELAY);
            match feed.reread().await {
                Ok(flow) => return flow,
                Err(error) => tracing::warn!(feed = %feed.client().label, attempt, %error, "reading events failed again"),
            }
        }
        tracing::warn!(feed = %feed.client().label, "giving up; the client may resume");
        Flow::Stop
    }

    /// Reads a live event; `None`, logged, when unreadable.
    fn read_live<'a>(&self, payload: &'a [u8]) -> Option<(Head, &'a str)> {
        let parsed = parse(payload);
        if parsed.is_none() {
            tracing::warn!(feed = %self.label, "unreadable live event");
        }
        parsed
    }

    /// Passes on one live event of `task`: dropped if the client has it,
    /// sent if it is the next, else the history after the gap is read and
    /// sent instead.
    async fn deliver(
        &self,
        queue: &Queue,
        tenant: &TenantId,
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
        let missed = queue.reader().events_after(tenant, task, cursor.last).await?;
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
        if self.out.send(frame(head, raw, head.seq.to_string())).await.is_err() {
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

    /// Sends one event of a tenant's feed at position `id`.
    async fn send_at(&self, id: FeedId, head: &Head, raw: &str) -> Flow {
        match self.out.send(frame(head, raw, id.to_string())).await {
            Ok(()) => Flow::Continue,
            Err(_) => Flow::Stop,
        }
    }
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
    async fn a_frame_carries_its_position_type_and_the_stored_json() {
        let (head, raw) = parse(REASONING.as_bytes()).expect("parses");
        assert_eq!(bytes_of(frame(&head, raw, "3".into())).await, format!("id: 3\nevent: reasoning\ndata: {raw}\n\n"));
        let at = FeedId::entry(17, 2).to_string();
        assert_eq!(bytes_of(frame(&head, raw, at)).await, format!("id: 17-2\nevent: reasoning\ndata: {raw}\n\n"));
    }

    #[tokio::test]
    async fn a_strange_type_is_not_used_as_an_event_name() {
        let (head, raw) = parse(br#"{"seq":1,"type":"a b"}"#).expect("parses");
        assert!(!bytes_of(frame(&head, raw, "1".into())).await.contains("event:"));
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
