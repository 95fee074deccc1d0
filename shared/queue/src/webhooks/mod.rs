//! Webhooks: a tenant's endpoints, the messages made for them from the
//! tenant's feed, and their delivery, signed as Standard Webhooks.
//!
//! Off the task path: nothing here runs in a task script. The dispatcher
//! ([`dispatch`]) reads each tenant's feed stream with the consumer group
//! `webhooks`, makes one message per event and endpoint that wants it, and
//! acknowledges the entry only after the messages are stored, so a worker
//! killed midway leaves the entry pending and another takes it over; a
//! message's id is derived from the event and the endpoint, so doing it
//! twice makes no second message. The deliverer ([`deliver`]) takes due
//! messages under a lease (a killed deliverer's messages come due again),
//! posts them with a timeout, and schedules retries with backoff and
//! jitter. So every message is delivered at least once, with the same
//! `webhook-id` each time, however workers and Redis restart (with AOF).
//!
//! One endpoint never holds up another: each has its own due queue and at
//! most [`due::PER_ENDPOINT`] attempts under way ([`due`]), each bounded by
//! [`deliver::TIMEOUT`].
//!
//! Layout (see [`crate::keys`]): an endpoint is a hash under its tenant's
//! tag, indexed per tenant; messages, the due queues and each endpoint's
//! delivery log share `{w}`.

pub mod dispatch;
pub mod due;
mod messages;
pub mod relay;
pub mod signing;
pub mod target;

use std::collections::HashMap;
use std::sync::Arc;

use redis::AsyncCommands;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

pub use crate::page::{lex_page, Order, Page, MAX_PAGE};
pub use flotilla_types::address::{embedded_v4, kind_of, AddressKind};
pub use messages::{AttemptRecord, Delivery, DeliveryStatus, Message, Next};

use crate::error::QueueError;
use crate::keys::Keys;
use crate::redis_conn::Redis;
use flotilla_config::WebhooksConfig;
use flotilla_types::clock;
use flotilla_types::ids::{BatchId, TenantId, WebhookId};
use flotilla_types::ValidationError;
use target::{Lookup, Policy, SystemLookup};

/// The consumer group the dispatcher reads the tenant feeds with.
pub const GROUP: &str = "webhooks";

/// What a webhook reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
pub enum EventType {
    #[serde(rename = "task.succeeded")]
    TaskSucceeded,
    #[serde(rename = "task.failed")]
    TaskFailed,
    #[serde(rename = "task.cancelled")]
    TaskCancelled,
    #[serde(rename = "task.waiting")]
    TaskWaiting,
    /// A task's check gave its verdict (or its set-up failed).
    #[serde(rename = "task.checked")]
    TaskChecked,
    #[serde(rename = "batch.completed")]
    BatchCompleted,
}

impl EventType {
    /// The webhook event a task event is reported as, if any.
    pub fn of_task_event(kind: &str) -> Option<Self> {
        match kind {
            "succeeded" => Some(Self::TaskSucceeded),
            "failed" => Some(Self::TaskFailed),
            "cancelled" => Some(Self::TaskCancelled),
            "waiting" => Some(Self::TaskWaiting),
            "checked" => Some(Self::TaskChecked),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::TaskSucceeded => "task.succeeded",
            Self::TaskFailed => "task.failed",
            Self::TaskCancelled => "task.cancelled",
            Self::TaskWaiting => "task.waiting",
            Self::TaskChecked => "task.checked",
            Self::BatchCompleted => "batch.completed",
        }
    }
}

/// A new endpoint, as `POST /v1/webhooks` takes it.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewEndpoint {
    /// Where to post; `https://` only unless the operator allows `http://`.
    #[schema(pattern = r"^https://[A-Za-z][A-Za-z0-9-]*(\.[A-Za-z][A-Za-z0-9-]*)*(:[0-9]{1,4})?(/[^\s]*)?$")]
    pub url: String,
    /// What to report; at least one.
    #[schema(min_items = 1)]
    pub events: Vec<EventType>,
    /// Only events of this batch's tasks (and its completion).
    pub batch_id: Option<BatchId>,
}

/// A change to an endpoint (`PATCH /v1/webhooks/{id}`).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EndpointPatch {
    #[schema(pattern = r"^https://[A-Za-z][A-Za-z0-9-]*(\.[A-Za-z][A-Za-z0-9-]*)*(:[0-9]{1,4})?(/[^\s]*)?$")]
    pub url: Option<String>,
    #[schema(min_items = 1)]
    pub events: Option<Vec<EventType>>,
    /// `false` also re-enables an endpoint disabled by a `410 Gone`.
    pub disabled: Option<bool>,
}

/// An endpoint as the API shows it (never its secret).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Endpoint {
    #[schema(value_type = String)]
    pub id: WebhookId,
    pub url: String,
    pub events: Vec<EventType>,
    #[schema(value_type = Option<String>)]
    pub batch_id: Option<BatchId>,
    pub disabled: bool,
    /// Why it was disabled, when the receiver asked (`410 Gone`).
    pub disabled_reason: Option<String>,
    /// RFC 3339.
    pub created_at: String,
}

/// An endpoint with what delivery needs.
#[derive(Debug, Clone)]
pub struct StoredEndpoint {
    pub view: Endpoint,
    pub secret: String,
    /// The secret before the last rotation, and until when (epoch ms) it still signs.
    pub old_secret: Option<(String, i64)>,
}

impl StoredEndpoint {
    /// The secrets that sign now: the current one, and the previous one
    /// during its grace period.
    pub fn signing_secrets(&self, now_ms: i64) -> Vec<&str> {
        let mut secrets = vec![self.secret.as_str()];
        if let Some((old, until)) = &self.old_secret {
            if *until > now_ms {
                secrets.push(old);
            }
        }
        secrets
    }

    /// Whether this endpoint wants `event` of a task of `batch`.
    pub fn wants(&self, event: EventType, batch: Option<&str>) -> bool {
        let view = &self.view;
        !view.disabled
            && view.events.contains(&event)
            && view.batch_id.as_ref().is_none_or(|wanted| batch == Some(wanted.as_str()))
    }
}

/// What the webhook calls can fail with.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    #[error("no such webhook")]
    NotFound,
    #[error("no such message")]
    NoMessage,
    #[error(transparent)]
    Queue(#[from] QueueError),
}

impl From<redis::RedisError> for WebhookError {
    fn from(e: redis::RedisError) -> Self {
        Self::Queue(e.into())
    }
}

/// The webhook store of one fleet.
#[derive(Clone)]
pub struct Webhooks {
    redis: Redis,
    keys: Keys,
    config: WebhooksConfig,
    retention_ms: u64,
    /// How targets' names are resolved, to check them at creation and at
    /// each delivery.
    lookup: Arc<dyn Lookup>,
}

impl Webhooks {
    pub fn new(redis: Redis, keys: Keys, config: WebhooksConfig, retention_ms: u64) -> Self {
        Self { redis, keys, config, retention_ms, lookup: Arc::new(SystemLookup) }
    }

    /// The same store resolving targets' names with `lookup`.
    pub fn with_lookup(mut self, lookup: Arc<dyn Lookup>) -> Self {
        self.lookup = lookup;
        self
    }

    /// How targets' names are resolved.
    pub fn lookup(&self) -> Arc<dyn Lookup> {
        Arc::clone(&self.lookup)
    }

    /// The store beside `queue`, keeping messages for its retention.
    /// The configuration the hooks were made with.
    pub fn config(&self) -> &WebhooksConfig {
        &self.config
    }

    pub fn of_queue(queue: &crate::queue::Queue, config: WebhooksConfig) -> Self {
        let retention_ms = queue.settings().retention.as_millis() as u64;
        Self::new(queue.redis().clone(), queue.keys().clone(), config, retention_ms)
    }

    /// What targets are allowed.
    pub fn policy(&self) -> Policy {
        Policy { allow_http: self.config.allow_http, allow_private: self.config.allow_private }
    }

    /// Checks a new or changed target: its form and, unless private targets
    /// are allowed, the addresses it names or resolves to now.
    async fn check_url(&self, url: &str) -> Result<(), ValidationError> {
        self.policy()
            .vet_target(url, self.lookup.as_ref())
            .await
            .map_err(|refusal| ValidationError::at("url", refusal.to_string()))
    }

    fn check_events(events: &[EventType]) -> Result<String, ValidationError> {
        if events.is_empty() {
            return Err(ValidationError::at("events", "name at least one event type"));
        }
        serde_json::to_string(events).map_err(|e| ValidationError::at("events", e.to_string()))
    }

    /// Stores a new endpoint; returns it and its secret.
    pub async fn create(&self, tenant: &TenantId, new: NewEndpoint) -> Result<(Endpoint, String), WebhookError> {
        self.check_url(&new.url).await?;
        self.store(tenant, WebhookId::generate(), new).await
    }

    /// Stores an endpoint whose target is already judged; returns it and its secret.
    async fn store(&self, tenant: &TenantId, id: WebhookId, new: NewEndpoint) -> Result<(Endpoint, String), WebhookError> {
        let events = Self::check_events(&new.events)?;
        let secret = signing::new_secret();
        let now = clock::now_ms();
        let mut fields = vec![
            ("url", new.url.clone()),
            ("events", events),
            ("secret", secret.clone()),
            ("disabled", "0".to_owned()),
            ("created_at", now.to_string()),
        ];
        if let Some(batch) = &new.batch_id {
            fields.push(("batch", batch.to_string()));
        }
        let mut conn = self.redis.shared();
        let () = conn.hset_multiple(self.keys.webhook(tenant, id.as_str()), &fields).await?;
        let () = conn.zadd(self.keys.tenant_webhooks(tenant), id.as_str(), 0).await?;
        self.follow_feed(tenant).await?;
        let view = Endpoint {
            id,
            url: new.url,
            events: new.events,
            batch_id: new.batch_id,
            disabled: false,
            disabled_reason: None,
            created_at: clock::rfc3339(now),
        };
        Ok((view, secret))
    }

    /// Makes the dispatcher read `tenant`'s feed from now on.
    async fn follow_feed(&self, tenant: &TenantId) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.keys.tenant_feed(tenant))
            .arg(GROUP)
            .arg("$")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        if let Err(e) = created {
            if e.code() != Some("BUSYGROUP") {
                return Err(e.into());
            }
        }
        let () = conn.sadd(self.keys.webhook_tenants(), tenant.as_str()).await?;
        Ok(())
    }

    /// One endpoint with its secrets.
    pub async fn stored(&self, tenant: &TenantId, id: &str) -> Result<StoredEndpoint, WebhookError> {
        let mut conn = self.redis.shared();
        let hash: HashMap<String, String> = conn.hgetall(self.keys.webhook(tenant, id)).await?;
        endpoint_from_hash(id, hash).ok_or(WebhookError::NotFound)
    }

    /// One endpoint.
    pub async fn get(&self, tenant: &TenantId, id: &WebhookId) -> Result<Endpoint, WebhookError> {
        Ok(self.stored(tenant, id.as_str()).await?.view)
    }

    /// Every endpoint of `tenant`, with secrets, for the dispatcher.
    pub async fn all(&self, tenant: &TenantId) -> Result<Vec<StoredEndpoint>, QueueError> {
        let mut conn = self.redis.shared();
        let ids: Vec<String> = conn.zrange(self.keys.tenant_webhooks(tenant), 0, -1).await?;
        let reads = ids.iter().map(|id| redis::Cmd::hgetall(self.keys.webhook(tenant, id))).collect();
        let hashes: Vec<HashMap<String, String>> = self.redis.query_many(reads).await?;
        Ok(ids.iter().zip(hashes).filter_map(|(id, hash)| endpoint_from_hash(id, hash)).collect())
    }

    /// A page of `tenant`'s endpoints, oldest first, after `cursor`.
    pub async fn list(&self, tenant: &TenantId, limit: usize, cursor: Option<&str>) -> Result<Page<Endpoint>, WebhookError> {
        let page = lex_page(&self.redis, &self.keys.tenant_webhooks(tenant), limit, cursor, Order::Oldest).await?;
        let reads = page.items.iter().map(|id| redis::Cmd::hgetall(self.keys.webhook(tenant, id))).collect();
        let hashes: Vec<HashMap<String, String>> = self.redis.query_many(reads).await?;
        let items = page.items.iter().zip(hashes).filter_map(|(id, hash)| endpoint_from_hash(id, hash)).map(|e| e.view).collect();
        Ok(Page { items, next_cursor: page.next_cursor })
    }

    /// Changes an endpoint.
    pub async fn patch(&self, tenant: &TenantId, id: &WebhookId, patch: EndpointPatch) -> Result<Endpoint, WebhookError> {
        self.stored(tenant, id.as_str()).await?;
        let mut fields: Vec<(&str, String)> = Vec::new();
        if let Some(url) = &patch.url {
            self.check_url(url).await?;
            fields.push(("url", url.clone()));
        }
        if let Some(events) = &patch.events {
            fields.push(("events", Self::check_events(events)?));
        }
        if let Some(disabled) = patch.disabled {
            fields.push(("disabled", if disabled { "1" } else { "0" }.to_owned()));
        }
        let key = self.keys.webhook(tenant, id.as_str());
        let mut conn = self.redis.shared();
        if !fields.is_empty() {
            let () = conn.hset_multiple(&key, &fields).await?;
        }
        if patch.disabled == Some(false) {
            let () = conn.hdel(&key, "disabled_reason").await?;
        }
        self.get(tenant, id).await
    }

    /// Deletes an endpoint; its pending messages fail at their next attempt.
    pub async fn delete(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), WebhookError> {
        let mut conn = self.redis.shared();
        let removed: u64 = conn.del(self.keys.webhook(tenant, id.as_str())).await?;
        if removed > 0 {
            let () = conn.del(self.keys.webhook_deliveries(id.as_str())).await?;
        }
        let () = conn.zrem(self.keys.tenant_webhooks(tenant), id.as_str()).await?;
        if removed == 0 {
            return Err(WebhookError::NotFound);
        }
        Ok(())
    }

    /// Gives an endpoint a new secret; the old one keeps signing (beside the
    /// new one) for `grace_ms`. Returns the new secret.
    pub async fn rotate(&self, tenant: &TenantId, id: &WebhookId, grace_ms: i64) -> Result<String, WebhookError> {
        let current = self.stored(tenant, id.as_str()).await?;
        let secret = signing::new_secret();
        let until = clock::now_ms() + grace_ms;
        let fields = [("secret", secret.clone()), ("old_secret", current.secret), ("old_until", until.to_string())];
        let mut conn = self.redis.shared();
        let () = conn.hset_multiple(self.keys.webhook(tenant, id.as_str()), &fields).await?;
        Ok(secret)
    }

    /// Disables an endpoint, saying why.
    pub async fn disable(&self, tenant: &TenantId, id: &str, reason: &str) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let fields = [("disabled", "1"), ("disabled_reason", reason)];
        let () = conn.hset_multiple(self.keys.webhook(tenant, id), &fields).await?;
        Ok(())
    }
}

fn endpoint_from_hash(id: &str, mut hash: HashMap<String, String>) -> Option<StoredEndpoint> {
    let id = WebhookId::parse(id).ok()?;
    let url = hash.remove("url")?;
    let secret = hash.remove("secret")?;
    let events = serde_json::from_str(hash.get("events")?).ok()?;
    let created_ms = hash.get("created_at").and_then(|c| c.parse().ok()).unwrap_or(0);
    let old_secret = match (hash.remove("old_secret"), hash.get("old_until").and_then(|u| u.parse().ok())) {
        (Some(old), Some(until)) => Some((old, until)),
        _ => None,
    };
    let view = Endpoint {
        id,
        url,
        events,
        batch_id: hash.get("batch").and_then(|b| BatchId::parse(b).ok()),
        disabled: hash.get("disabled").map(String::as_str) == Some("1"),
        disabled_reason: hash.remove("disabled_reason"),
        created_at: clock::rfc3339(created_ms),
    };
    Some(StoredEndpoint { view, secret, old_secret })
}

/// The webhooks' Redis scripts by name (see `crate::testing`).
#[cfg(feature = "testing")]
pub(crate) fn lua_scripts() -> Vec<(&'static str, &'static redis::Script)> {
    vec![
        ("webhooks/create_messages", &messages::CREATE),
        ("webhooks/take_due", &due::TAKE),
        ("webhooks/release_due", &due::RELEASE),
    ]
}
