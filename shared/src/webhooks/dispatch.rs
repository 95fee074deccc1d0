//! The dispatcher: reads the feeds of tenants with webhooks (consumer group
//! [`super::GROUP`]) and turns each event an endpoint wants into a stored
//! message, acknowledging the entry only afterwards. Entries a dead
//! worker left pending are taken over after [`STALE_MS`].

use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use redis::AsyncCommands;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{EventType, StoredEndpoint, Webhooks, GROUP};
use crate::clock;
use crate::error::QueueError;
use crate::event::is_terminal_type;
use crate::ids::{BatchId, MessageId, TaskId, TenantId};
use crate::queue::{FeedId, Queue};

/// How long an entry may stay pending with another consumer before it is
/// taken over.
const STALE_MS: u64 = 30_000;
/// Entries read per tenant per pass.
const READ: usize = 200;

/// The fields of an event the dispatcher reads.
#[derive(Debug, Deserialize)]
struct Head {
    #[serde(rename = "type")]
    kind: String,
    task_id: Option<String>,
    batch_id: Option<String>,
    ts: Option<String>,
}

/// Makes messages from the tenants' feeds.
#[derive(Clone)]
pub struct Dispatcher {
    queue: Queue,
    hooks: Webhooks,
    consumer: String,
}

impl Dispatcher {
    pub fn new(queue: Queue, hooks: Webhooks, consumer: String) -> Self {
        Self { queue, hooks, consumer }
    }

    /// One pass over every tenant with webhooks; returns how many entries
    /// were handled.
    pub async fn run_once(&self) -> Result<usize, QueueError> {
        let tenants: Vec<String> = self.queue.redis().shared().smembers(self.queue.keys().webhook_tenants()).await?;
        let mut handled = 0;
        for tenant in tenants.iter().filter_map(|t| TenantId::parse(t).ok()) {
            match self.tenant(&tenant).await {
                Ok(n) => handled += n,
                Err(error) => tracing::warn!(%tenant, %error, "dispatching webhooks failed"),
            }
        }
        Ok(handled)
    }

    async fn tenant(&self, tenant: &TenantId) -> Result<usize, QueueError> {
        let feed = self.queue.keys().tenant_feed(tenant);
        let mut conn = self.queue.redis().shared();
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
        let mut entries = match stale {
            Ok(reply) => reply.claimed,
            Err(e) if e.code() == Some("NOGROUP") => {
                self.hooks.follow_feed(tenant).await?;
                return Ok(0);
            }
            Err(e) => return Err(e.into()),
        };
        let fresh: Option<StreamReadReply> = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(GROUP)
            .arg(&self.consumer)
            .arg("COUNT")
            .arg(READ)
            .arg("STREAMS")
            .arg(&feed)
            .arg(">")
            .query_async(&mut conn)
            .await?;
        entries.extend(fresh.into_iter().flat_map(|r| r.keys).flat_map(|k| k.ids));
        if entries.is_empty() {
            return Ok(0);
        }
        let endpoints = self.hooks.all(tenant).await?;
        for entry in &entries {
            self.route(tenant, &endpoints, entry).await?;
        }
        // One acknowledgement for the whole read, once every entry's
        // messages are stored: an entry is never acknowledged before.
        let ids: Vec<&str> = entries.iter().map(|entry| entry.id.as_str()).collect();
        let () = conn.xack(&feed, GROUP, &ids).await?;
        Ok(entries.len())
    }

    /// Makes the messages one feed entry calls for.
    async fn route(&self, tenant: &TenantId, endpoints: &[StoredEndpoint], entry: &StreamId) -> Result<(), QueueError> {
        let (Ok(position), Some(event)) = (entry.id.parse::<FeedId>(), entry.get::<String>("e")) else { return Ok(()) };
        let Ok(head) = serde_json::from_str::<Head>(&event) else { return Ok(()) };
        let batch = head.batch_id.as_deref();
        if let Some(kind) = EventType::of_task_event(&head.kind) {
            let wanting: Vec<&StoredEndpoint> = endpoints.iter().filter(|e| e.wants(kind, batch)).collect();
            if !wanting.is_empty() {
                let data = self.task_data(tenant, head.task_id.as_deref(), &event).await?;
                let body = body(kind, head.ts.as_deref(), data);
                for endpoint in wanting {
                    let id = MessageId::derived(position.ms, &format!("{position}/{}", endpoint.view.id));
                    self.hooks.create_message(&id, tenant, &endpoint.view.id, kind, &body).await?;
                }
            }
        }
        if is_terminal_type(&head.kind) {
            if let (Some(batch), Some(task)) = (batch, head.task_id.as_deref()) {
                self.batch_progress(tenant, endpoints, batch, task).await?;
            }
        }
        Ok(())
    }

    /// A task as `GET /v1/tasks/{id}` shows it (without presigned links);
    /// the event itself when the task is gone.
    async fn task_data(&self, tenant: &TenantId, task: Option<&str>, event: &str) -> Result<Value, QueueError> {
        let record = match task.and_then(|t| TaskId::parse(t).ok()) {
            Some(id) => self.queue.get(tenant, &id).await?,
            None => None,
        };
        Ok(match record {
            Some(record) => serde_json::to_value(record).unwrap_or(Value::Null),
            None => serde_json::from_str(event).unwrap_or(Value::Null),
        })
    }

    /// Counts a batch's ended task; once all have ended, reports the batch
    /// to the endpoints that want `batch.completed`.
    async fn batch_progress(
        &self,
        tenant: &TenantId,
        endpoints: &[StoredEndpoint],
        batch: &str,
        task: &str,
    ) -> Result<(), QueueError> {
        let wanting: Vec<&StoredEndpoint> =
            endpoints.iter().filter(|e| e.wants(EventType::BatchCompleted, Some(batch))).collect();
        let Ok(batch_id) = BatchId::parse(batch) else { return Ok(()) };
        if wanting.is_empty() {
            return Ok(());
        }
        let Some(record) = self.queue.batch(tenant, &batch_id).await? else { return Ok(()) };
        let ended_key = self.queue.keys().batch_ended(&batch_id);
        let mut conn = self.queue.redis().shared();
        let (ended,): (u64,) = redis::pipe()
            .sadd(&ended_key, task)
            .ignore()
            .pexpire(&ended_key, self.queue.settings().retention.as_millis() as i64)
            .ignore()
            .scard(&ended_key)
            .query_async(&mut conn)
            .await?;
        if ended < record.total {
            return Ok(());
        }
        let (counts, finished) = self.queue.batch_counts(&record).await?;
        let data = json!({
            "id": record.id,
            "created_at": clock::rfc3339(record.created_at_ms),
            "total": record.total,
            "counts": counts,
            "finished_at": finished.map(clock::rfc3339),
        });
        let body = body(EventType::BatchCompleted, None, data);
        for endpoint in wanting {
            let id = MessageId::derived(record.created_at_ms.max(0) as u64, &format!("{batch}/{}/completed", endpoint.view.id));
            self.hooks.create_message(&id, tenant, &endpoint.view.id, EventType::BatchCompleted, &body).await?;
        }
        Ok(())
    }
}

/// The body of a message: `{"type", "timestamp", "data"}`.
fn body(kind: EventType, ts: Option<&str>, data: Value) -> String {
    let timestamp = ts.map_or_else(|| clock::rfc3339(clock::now_ms()), str::to_owned);
    json!({"type": kind, "timestamp": timestamp, "data": data}).to_string()
}
