//! The dispatcher: reads the feeds of tenants with webhooks (consumer group
//! [`super::GROUP`]) and turns each event an endpoint wants into a stored
//! message, acknowledging the entries only afterwards. Entries a dead
//! worker left pending are taken over after [`STALE_MS`].
//!
//! It runs beside the drain in every worker, so a pass costs a fixed
//! handful of round trips whatever it reads: the read of the feed, the
//! tenant's endpoints, one pipelined read of every task the read's wanted
//! events name, per batch that may have completed its count, one script
//! storing all the read's messages (in chunks), and one acknowledgement.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::messages::NewMessage;
use super::{EventType, StoredEndpoint, Webhooks, GROUP};
use crate::error::QueueError;
use crate::queue::feed::{events_in, texts_of};
use crate::queue::{FeedId, Queue, TaskRecord};
use flotilla_types::clock;
use flotilla_types::event::is_terminal_type;
use flotilla_types::ids::{BatchId, MessageId, TaskId, TenantId};

/// How long an entry may stay pending with another consumer before it is
/// taken over.
const STALE_MS: u64 = 30_000;
/// Entries read per tenant per pass.
pub const READ: usize = 200;
/// Passes between two looks for stale entries (a few seconds apart).
const RECLAIM_EVERY: u64 = 10;

/// The fields of an event the dispatcher reads, borrowed from it.
#[derive(Debug, Deserialize)]
struct Head<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    task_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    batch_id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    ts: Option<Cow<'a, str>>,
}

/// One feed entry read: its position and the event's text.
struct Read<'a> {
    position: FeedId,
    event: &'a str,
    head: Head<'a>,
}

/// A task event some endpoints want: the entry it came from (an index into
/// the pass's reads), its type and task, and the endpoints.
struct Wanted<'a> {
    read: usize,
    kind: EventType,
    task: Option<TaskId>,
    endpoints: Vec<&'a StoredEndpoint>,
}

/// The body of a message: `{"type", "timestamp", "data"}`.
#[derive(Serialize)]
struct Body<'a, D: Serialize> {
    #[serde(rename = "type")]
    kind: EventType,
    timestamp: &'a str,
    data: D,
}

/// Makes messages from the tenants' feeds.
#[derive(Clone)]
pub struct Dispatcher {
    queue: Queue,
    hooks: Webhooks,
    consumer: String,
    passes: Arc<AtomicU64>,
}

impl Dispatcher {
    pub fn new(queue: Queue, hooks: Webhooks, consumer: String) -> Self {
        Self { queue, hooks, consumer, passes: Arc::default() }
    }

    /// One pass over every tenant with webhooks; returns how many entries
    /// were handled.
    pub async fn run_once(&self) -> Result<usize, QueueError> {
        let tenants: Vec<String> = self.queue.redis().shared().smembers(self.queue.keys().webhook_tenants()).await?;
        let reclaim = self.passes.fetch_add(1, Ordering::Relaxed).is_multiple_of(RECLAIM_EVERY);
        let mut handled = 0;
        for tenant in tenants.iter().filter_map(|t| TenantId::parse(t).ok()) {
            match self.tenant(&tenant, reclaim).await {
                Ok(n) => handled += n,
                Err(error) => tracing::warn!(%tenant, %error, "dispatching webhooks failed"),
            }
        }
        Ok(handled)
    }

    async fn tenant(&self, tenant: &TenantId, reclaim: bool) -> Result<usize, QueueError> {
        let Some(entries) = self.read(tenant, reclaim).await? else {
            self.hooks.follow_feed(tenant).await?;
            return Ok(0);
        };
        if entries.is_empty() {
            return Ok(0);
        }
        let endpoints = self.hooks.all(tenant).await?;
        let reads: Vec<Read<'_>> = entries.iter().flat_map(parse).collect();
        let mut messages = self.task_messages(tenant, &endpoints, &reads).await?;
        messages.extend(self.batch_messages(tenant, &endpoints, &reads).await?);
        self.hooks.create_messages(tenant, &messages).await?;
        // One acknowledgement for the whole read, once every entry's
        // messages are stored: an entry is never acknowledged before.
        let ids: Vec<&str> = entries.iter().map(|entry| entry.id.as_str()).collect();
        let () = self.queue.redis().shared().xack(self.queue.keys().tenant_feed(tenant), GROUP, &ids).await?;
        Ok(entries.len())
    }

    /// The entries to handle: with `reclaim`, those left pending too long by
    /// any consumer, then new ones. `None` when the feed has no group (it
    /// was lost with its stream).
    async fn read(&self, tenant: &TenantId, reclaim: bool) -> Result<Option<Vec<StreamId>>, QueueError> {
        let feed = self.queue.keys().tenant_feed(tenant);
        let mut conn = self.queue.redis().shared();
        let mut entries = Vec::new();
        if reclaim {
            let stale: redis::RedisResult<StreamAutoClaimReply> = redis::cmd("XAUTOCLAIM")
                .arg(&feed)
                .arg(GROUP)
                .arg(&self.consumer)
                .arg(STALE_MS)
                .arg("0-0")
                .arg("COUNT")
                .arg(READ)
                .query_async(&mut conn)
                .await;
            match stale {
                Ok(reply) => entries = reply.claimed,
                Err(e) if e.code() == Some("NOGROUP") => return Ok(None),
                Err(e) => return Err(e.into()),
            }
        }
        let fresh: redis::RedisResult<Option<StreamReadReply>> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(READ)
            .arg("STREAMS")
            .arg(&feed)
            .arg(">")
            .query_async(&mut conn)
            .await;
        match fresh {
            Ok(fresh) => entries.extend(fresh.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids)),
            Err(e) if e.code() == Some("NOGROUP") => return Ok(None),
            Err(e) => return Err(e.into()),
        }
        Ok(Some(entries))
    }

    /// The messages of the task events endpoints want, each task read once
    /// for all of them.
    async fn task_messages(
        &self,
        tenant: &TenantId,
        endpoints: &[StoredEndpoint],
        reads: &[Read<'_>],
    ) -> Result<Vec<NewMessage>, QueueError> {
        let wanted: Vec<Wanted<'_>> = reads.iter().enumerate().filter_map(|(i, read)| wanted_by(i, read, endpoints)).collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let mut index: HashMap<&TaskId, usize> = HashMap::new();
        let mut ids: Vec<TaskId> = Vec::new();
        for task in wanted.iter().filter_map(|w| w.task.as_ref()) {
            index.entry(task).or_insert_with(|| {
                ids.push(task.clone());
                ids.len() - 1
            });
        }
        let records = self.queue.reader().get_many(tenant, &ids).await?;
        let mut messages = Vec::with_capacity(wanted.iter().map(|w| w.endpoints.len()).sum());
        for w in &wanted {
            let read = &reads[w.read];
            let record = w.task.as_ref().and_then(|t| records[index[t]].as_ref());
            let body = task_body(w.kind, read, record);
            let position = read.position.to_string();
            let message = |endpoint: &StoredEndpoint, body: String| NewMessage {
                id: MessageId::derived(read.position.ms, &format!("{position}/{}", endpoint.view.id)),
                endpoint: endpoint.view.id.clone(),
                kind: w.kind,
                body,
            };
            let Some((last, others)) = w.endpoints.split_last() else { continue };
            messages.extend(others.iter().map(|endpoint| message(endpoint, body.clone())));
            messages.push(message(last, body));
        }
        Ok(messages)
    }

    /// Counts the batches' ended tasks among `reads`, once per batch; the
    /// messages of the batches that have now all ended, for the endpoints
    /// that want `batch.completed`.
    async fn batch_messages(
        &self,
        tenant: &TenantId,
        endpoints: &[StoredEndpoint],
        reads: &[Read<'_>],
    ) -> Result<Vec<NewMessage>, QueueError> {
        let mut ended: Vec<(&str, Vec<&str>)> = Vec::new();
        for read in reads.iter().filter(|r| is_terminal_type(&r.head.kind)) {
            let (Some(batch), Some(task)) = (read.head.batch_id.as_deref(), read.head.task_id.as_deref()) else { continue };
            match ended.iter_mut().find(|(b, _)| *b == batch) {
                Some((_, tasks)) => tasks.push(task),
                None => ended.push((batch, vec![task])),
            }
        }
        let mut messages = Vec::new();
        for (batch, tasks) in ended {
            messages.extend(self.batch_progress(tenant, endpoints, batch, &tasks).await?);
        }
        Ok(messages)
    }

    /// Counts a batch's ended tasks; once all have ended, reports the batch
    /// to the endpoints that want `batch.completed`.
    async fn batch_progress(
        &self,
        tenant: &TenantId,
        endpoints: &[StoredEndpoint],
        batch: &str,
        tasks: &[&str],
    ) -> Result<Vec<NewMessage>, QueueError> {
        let wanting: Vec<&StoredEndpoint> =
            endpoints.iter().filter(|e| e.wants(EventType::BatchCompleted, Some(batch))).collect();
        let Ok(batch_id) = BatchId::parse(batch) else { return Ok(Vec::new()) };
        if wanting.is_empty() {
            return Ok(Vec::new());
        }
        let Some(record) = self.queue.reader().batch(tenant, &batch_id).await? else { return Ok(Vec::new()) };
        let ended_key = self.queue.keys().batch_ended(&batch_id);
        let mut conn = self.queue.redis().shared();
        let (ended,): (u64,) = redis::pipe()
            .sadd(&ended_key, tasks)
            .ignore()
            .pexpire(&ended_key, self.queue.settings().retention.as_millis() as i64)
            .ignore()
            .scard(&ended_key)
            .query_async(&mut conn)
            .await?;
        if ended < record.total {
            return Ok(Vec::new());
        }
        let (counts, finished) = self.queue.reader().batch_counts(&record).await?;
        let data = json!({
            "id": record.id,
            "created_at": clock::rfc3339(record.created_at_ms),
            "total": record.total,
            "counts": counts,
            "finished_at": finished.map(clock::rfc3339),
        });
        let body = body(EventType::BatchCompleted, &clock::rfc3339(clock::now_ms()), &data);
        Ok(wanting
            .into_iter()
            .map(|endpoint| NewMessage {
                id: MessageId::derived(record.created_at_ms.max(0) as u64, &format!("{batch}/{}/completed", endpoint.view.id)),
                endpoint: endpoint.view.id.clone(),
                kind: EventType::BatchCompleted,
                body: body.clone(),
            })
            .collect())
    }
}

/// The events of a feed entry, each at its position.
fn parse(entry: &StreamId) -> Vec<Read<'_>> {
    let Some(id) = entry.id.parse::<FeedId>().ok().filter(|id| !id.is_inside_entry()) else { return Vec::new() };
    events_in(id, &texts_of(entry))
        .filter_map(|(position, event)| Some(Read { position, event, head: serde_json::from_str::<Head<'_>>(event).ok()? }))
        .collect()
}

/// The endpoints that want the task event read as `reads[i]`, if any do.
fn wanted_by<'e>(i: usize, read: &Read<'_>, endpoints: &'e [StoredEndpoint]) -> Option<Wanted<'e>> {
    let kind = EventType::of_task_event(&read.head.kind)?;
    let batch = read.head.batch_id.as_deref();
    let wanting: Vec<&StoredEndpoint> = endpoints.iter().filter(|e| e.wants(kind, batch)).collect();
    if wanting.is_empty() {
        return None;
    }
    let task = read.head.task_id.as_deref().and_then(|t| TaskId::parse(t).ok());
    Some(Wanted { read: i, kind, task, endpoints: wanting })
}

/// A task event's body: the task as `GET /v1/tasks/{id}` shows it (without
/// presigned links), or the event itself when the task is gone.
fn task_body(kind: EventType, read: &Read<'_>, record: Option<&TaskRecord>) -> String {
    let now;
    let timestamp = match read.head.ts.as_deref() {
        Some(ts) => ts,
        None => {
            now = clock::rfc3339(clock::now_ms());
            &now
        }
    };
    match record {
        Some(record) => body(kind, timestamp, record),
        None => body(kind, timestamp, &serde_json::from_str::<Value>(read.event).unwrap_or(Value::Null)),
    }
}

/// The body of a message: `{"type", "timestamp", "data"}`.
fn body<D: Serialize>(kind: EventType, timestamp: &str, data: &D) -> String {
    serde_json::to_string(&Body { kind, timestamp, data })
        .unwrap_or_else(|_| json!({"type": kind, "timestamp": timestamp, "data": null}).to_string())
}
