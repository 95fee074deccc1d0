//! Webhook messages: one per event and endpoint, with its delivery state,
//! in its endpoint's due queue ([`super::due`]) until it has succeeded or
//! failed for good, and in its endpoint's delivery log (the newest
//! `FLOTILLA_WEBHOOK_LOG_MAX`) until it expires after the retention.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::{AsyncCommands, Script};
use serde::Serialize;
use utoipa::ToSchema;

use super::due::Taken;
use super::{lex_page, EventType, Order, Page, WebhookError, Webhooks};
use crate::error::QueueError;
use crate::redis_lua::{self, arg_group};
use flotilla_types::clock;
use flotilla_types::ids::{MessageId, TenantId, WebhookId};

/// Where a message stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryStatus {
    /// Not delivered yet; an attempt is due or running.
    Pending,
    Succeeded,
    /// Every attempt failed, the endpoint answered `410 Gone`, or it is gone.
    Failed,
}

/// One message in an endpoint's delivery log.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Delivery {
    /// The `webhook-id` it is sent with.
    #[schema(value_type = String)]
    pub msg_id: MessageId,
    #[serde(rename = "type")]
    pub kind: EventType,
    pub status: DeliveryStatus,
    pub attempts: u32,
    /// The status code of the last answer, if there was one.
    pub response_code: Option<u16>,
    /// How long the last attempt took.
    pub latency_ms: Option<u64>,
    /// Why the last attempt failed (refused target, timeout, status).
    pub error: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, of the last attempt.
    pub last_attempt_at: Option<String>,
    /// RFC 3339, of the next attempt while pending.
    pub next_attempt_at: Option<String>,
}

/// Keys per message of [`CREATE`]: its hash, its endpoint's queue and its
/// endpoint's log.
const MESSAGE_KEYS: usize = 3;
arg_group! {
    /// One message's arguments of [`CREATE`].
    struct MessageGroup<'a> {
        id: &'a str,
        endpoint: &'a str,
        kind: &'a str,
        body: &'a str,
    }
}

/// Arguments per message of [`CREATE`].
const MESSAGE_GROUP: usize = MessageGroup::WIDTH;

/// Stores messages of one tenant, each unless it exists, makes each due in
/// its endpoint's queue and puts it in the endpoint's log; then, once per
/// endpoint, wakes the endpoint and trims its log to its newest
/// `FLOTILLA_WEBHOOK_LOG_MAX`. `KEYS[1]` the endpoint set, then per message
/// its [`MESSAGE_KEYS`]; `ARGV` now (ms), retention (ms), the log's bound,
/// the tenant, then per message its [`MESSAGE_GROUP`] values. Returns how many were stored.
pub(crate) static CREATE: LazyLock<Script> = LazyLock::new(|| {
    redis_lua::script(
        &[include_str!("lua/create_messages.lua")],
        &[("MESSAGE_KEYS", &MESSAGE_KEYS), ("MESSAGE_GROUP", &MESSAGE_GROUP)],
    )
});

/// Messages one [`CREATE`] call stores at most, so no call holds Redis long.
const CREATE_CHUNK: usize = 128;
/// Body bytes one [`CREATE`] call carries at most (a single larger message
/// goes alone).
const CREATE_CHUNK_BYTES: usize = 512 * 1024;

/// A message to store: what one event reports to one endpoint.
#[derive(Debug, Clone)]
pub struct NewMessage {
    pub id: MessageId,
    pub endpoint: WebhookId,
    pub kind: EventType,
    pub body: String,
}

/// A message as stored, for the deliverer.
#[derive(Debug, Clone)]
pub struct Message {
    pub id: MessageId,
    pub tenant: TenantId,
    pub endpoint: String,
    pub body: String,
    pub status: String,
    pub attempts: u32,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptRecord {
    pub response_code: Option<u16>,
    pub latency_ms: u64,
    pub error: Option<String>,
}

/// What happens to a message after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    Done(DeliveryStatus),
    RetryAt(i64),
}

impl Next {
    /// When the next attempt is due, if there is one.
    fn retry_at(self) -> Option<i64> {
        match self {
            Self::Done(_) => None,
            Self::RetryAt(at) => Some(at),
        }
    }
}

impl Webhooks {
    /// Stores `tenant`'s messages, due now, in as few calls as their size
    /// allows; those already stored stay as they are. Returns how many
    /// were new.
    pub(super) async fn create_messages(&self, tenant: &TenantId, messages: &[NewMessage]) -> Result<u64, QueueError> {
        let mut made = 0;
        let mut rest = messages;
        while !rest.is_empty() {
            let (mut count, mut bytes) = (0, 0);
            while count < rest.len()
                && count < CREATE_CHUNK
                && (count == 0 || bytes + rest[count].body.len() <= CREATE_CHUNK_BYTES)
            {
                bytes += rest[count].body.len();
                count += 1;
            }
            let (chunk, after) = rest.split_at(count);
            made += self.create_chunk(tenant, chunk).await?;
            rest = after;
        }
        Ok(made)
    }

    async fn create_chunk(&self, tenant: &TenantId, messages: &[NewMessage]) -> Result<u64, QueueError> {
        let now = clock::now_ms();
        let mut inv = CREATE.prepare_invoke();
        inv.key(self.keys.webhook_due());
        inv.arg(now).arg(self.retention_ms).arg(self.config.log_max).arg(tenant.as_str());
        for message in messages {
            let endpoint = message.endpoint.as_str();
            inv.key(self.keys.webhook_message(message.id.as_str()))
                .key(self.keys.webhook_endpoint_due(endpoint))
                .key(self.keys.webhook_deliveries(endpoint));
            inv.arg(MessageGroup { id: message.id.as_str(), endpoint, kind: message.kind.as_str(), body: message.body.as_str() });
        }
        Ok(inv.invoke_async(&mut self.redis.shared()).await?)
    }

    /// A stored message; `None` when it has expired.
    pub async fn message(&self, id: &MessageId) -> Result<Option<Message>, QueueError> {
        let mut conn = self.redis.shared();
        let mut hash: HashMap<String, String> = conn.hgetall(self.keys.webhook_message(id.as_str())).await?;
        let tenant = hash.get("tenant").and_then(|t| TenantId::parse(t).ok());
        let (Some(tenant), Some(endpoint), Some(body)) = (tenant, hash.remove("endpoint"), hash.remove("body")) else {
            return Ok(None);
        };
        Ok(Some(Message {
            id: id.clone(),
            tenant,
            endpoint,
            body,
            status: hash.remove("status").unwrap_or_default(),
            attempts: hash.get("attempts").and_then(|a| a.parse().ok()).unwrap_or(0),
        }))
    }

    /// Writes what an attempt came to and what happens next, and frees the
    /// attempt's slot.
    pub async fn record_attempt(
        &self,
        message: &Message,
        taken: &Taken,
        attempt: &AttemptRecord,
        next: Next,
    ) -> Result<(), QueueError> {
        let key = self.keys.webhook_message(message.id.as_str());
        let now = clock::now_ms();
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.hincr(&key, "attempts", 1).ignore();
        pipe.hset(&key, "last_at", now).ignore();
        pipe.hset(&key, "latency_ms", attempt.latency_ms).ignore();
        match attempt.response_code {
            Some(code) => pipe.hset(&key, "code", code).ignore(),
            None => pipe.hdel(&key, "code").ignore(),
        };
        match &attempt.error {
            Some(error) => pipe.hset(&key, "error", error).ignore(),
            None => pipe.hdel(&key, "error").ignore(),
        };
        self.add_next(&mut pipe, message, next);
        let () = pipe.query_async(&mut self.redis.shared()).await?;
        self.release(taken, next.retry_at()).await
    }

    /// Ends a message without an attempt (its endpoint is gone or disabled).
    pub async fn settle(&self, message: &Message, taken: &Taken, error: &str) -> Result<(), QueueError> {
        let key = self.keys.webhook_message(message.id.as_str());
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.hset(&key, "error", error).ignore();
        self.add_next(&mut pipe, message, Next::Done(DeliveryStatus::Failed));
        let () = pipe.query_async(&mut self.redis.shared()).await?;
        self.release(taken, None).await
    }

    /// Drops a message that has expired or ended from its endpoint's queue.
    pub async fn forget_due(&self, taken: &Taken) -> Result<(), QueueError> {
        self.release(taken, None).await
    }

    fn add_next(&self, pipe: &mut redis::Pipeline, message: &Message, next: Next) {
        let key = self.keys.webhook_message(message.id.as_str());
        match next {
            Next::Done(status) => {
                let text = if status == DeliveryStatus::Succeeded { "succeeded" } else { "failed" };
                pipe.hset(&key, "status", text).ignore();
                pipe.hdel(&key, "next_at").ignore();
            }
            Next::RetryAt(at) => {
                pipe.hset(&key, "next_at", at).ignore();
            }
        }
    }

    /// A page of an endpoint's delivery log, newest first.
    pub async fn deliveries(
        &self,
        tenant: &TenantId,
        endpoint: &WebhookId,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<Page<Delivery>, WebhookError> {
        self.stored(tenant, endpoint.as_str()).await?;
        let page = lex_page(&self.redis, &self.keys.webhook_deliveries(endpoint.as_str()), limit, cursor, Order::Newest).await?;
        let reads = page.items.iter().map(|id| redis::Cmd::hgetall(self.keys.webhook_message(id))).collect();
        let hashes: Vec<HashMap<String, String>> = self.redis.query_many(reads).await?;
        let items = page.items.iter().zip(hashes).filter_map(|(id, hash)| delivery_from_hash(id, hash)).collect();
        Ok(Page { items, next_cursor: page.next_cursor })
    }

    /// Sends a message of `endpoint` again now (one more attempt).
    pub async fn retry(&self, tenant: &TenantId, endpoint: &WebhookId, id: &MessageId) -> Result<Delivery, WebhookError> {
        self.stored(tenant, endpoint.as_str()).await?;
        let message = self.message(id).await?.ok_or(WebhookError::NoMessage)?;
        if message.tenant != *tenant || message.endpoint != endpoint.as_str() {
            return Err(WebhookError::NoMessage);
        }
        let now = clock::now_ms();
        let key = self.keys.webhook_message(id.as_str());
        let mut pipe = redis::pipe();
        pipe.atomic();
        pipe.hset(&key, "status", "pending").ignore();
        pipe.hset(&key, "next_at", now).ignore();
        self.schedule(&mut pipe, endpoint.as_str(), id.as_str(), now);
        pipe.hgetall(&key);
        let (hash,): (HashMap<String, String>,) = pipe.query_async(&mut self.redis.shared()).await?;
        delivery_from_hash(id.as_str(), hash).ok_or(WebhookError::NoMessage)
    }
}

fn delivery_from_hash(id: &str, hash: HashMap<String, String>) -> Option<Delivery> {
    let kind = serde_json::from_value(serde_json::Value::String(hash.get("type")?.clone())).ok()?;
    let status = match hash.get("status")?.as_str() {
        "succeeded" => DeliveryStatus::Succeeded,
        "failed" => DeliveryStatus::Failed,
        _ => DeliveryStatus::Pending,
    };
    let time = |field: &str| hash.get(field).and_then(|v| v.parse::<i64>().ok()).map(clock::rfc3339);
    Some(Delivery {
        msg_id: MessageId::parse(id).ok()?,
        kind,
        status,
        attempts: hash.get("attempts").and_then(|a| a.parse().ok()).unwrap_or(0),
        response_code: hash.get("code").and_then(|c| c.parse().ok()),
        latency_ms: hash.get("latency_ms").and_then(|l| l.parse().ok()),
        error: hash.get("error").cloned(),
        created_at: time("created_at").unwrap_or_default(),
        last_attempt_at: time("last_at"),
        next_attempt_at: if status == DeliveryStatus::Pending { time("next_at") } else { None },
    })
}
