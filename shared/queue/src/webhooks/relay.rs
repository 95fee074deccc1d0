//! Relayed endpoints: what `flotilla webhooks listen` receives through the
//! API, with no inbound port on the listener's side. The API makes an
//! endpoint whose target is `relay:<its id>` for the listener's tenant;
//! workers sign its deliveries as every other and, instead of posting them,
//! append them to the endpoint's relay stream, which the API passes on to
//! the listener while it listens and deletes with the endpoint when it
//! goes. A relayed endpoint is the tenant's own like any other: only its
//! tenant's events reach it, and only its tenant's key opens it.

use redis::AsyncCommands;

use super::{Endpoint, EventType, NewEndpoint, WebhookError, Webhooks};
use crate::error::QueueError;
use flotilla_types::ids::{BatchId, TenantId, WebhookId};

/// What a relayed endpoint's target starts with.
pub const RELAY_SCHEME: &str = "relay:";
/// Deliveries a relay stream keeps for a listener that reads late.
const RELAY_KEPT: usize = 1000;
/// How long a relay stream outlives its last delivery, should its
/// listener's API process end without deleting it.
const RELAY_TTL_S: i64 = 3600;
/// Deliveries read at once.
const RELAY_READ: usize = 100;

/// One signed delivery as the listener receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relayed {
    /// The stream entry's id: read after it next time.
    pub entry: String,
    /// `webhook-id`.
    pub msg_id: String,
    /// `webhook-timestamp`, epoch seconds.
    pub timestamp: i64,
    /// `webhook-signature`.
    pub signature: String,
    pub body: String,
}

/// The endpoint a relayed target names, if it is one.
pub fn relayed_endpoint(url: &str) -> Option<&str> {
    url.strip_prefix(RELAY_SCHEME)
}

impl Webhooks {
    /// Makes a relayed endpoint of `tenant` for these events (of one batch
    /// when given); returns it and its secret.
    pub async fn create_relay(
        &self,
        tenant: &TenantId,
        events: Vec<EventType>,
        batch_id: Option<BatchId>,
    ) -> Result<(Endpoint, String), WebhookError> {
        let id = WebhookId::generate();
        let url = format!("{RELAY_SCHEME}{id}");
        self.store(tenant, id, NewEndpoint { url, events, batch_id }).await
    }

    /// Appends one signed delivery to a relayed endpoint's stream.
    pub async fn relay(&self, tenant: &TenantId, endpoint: &str, delivery: &Relayed) -> Result<(), QueueError> {
        let key = self.keys.webhook_relay(tenant, endpoint);
        let fields = [
            ("id", delivery.msg_id.clone()),
            ("timestamp", delivery.timestamp.to_string()),
            ("signature", delivery.signature.clone()),
            ("body", delivery.body.clone()),
        ];
        let mut conn = self.redis.shared();
        let () = redis::pipe()
            .xadd_maxlen(&key, redis::streams::StreamMaxlen::Approx(RELAY_KEPT), "*", &fields)
            .ignore()
            .expire(&key, RELAY_TTL_S)
            .ignore()
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// The deliveries of a relayed endpoint after stream entry `after`
    /// (`0` for all), oldest first.
    pub async fn relayed_after(&self, tenant: &TenantId, endpoint: &str, after: &str) -> Result<Vec<Relayed>, QueueError> {
        let mut conn = self.redis.shared();
        let read: redis::streams::StreamRangeReply =
            conn.xrange_count(self.keys.webhook_relay(tenant, endpoint), format!("({after}"), "+", RELAY_READ).await?;
        Ok(read.ids.iter().filter_map(relayed_entry).collect())
    }

    /// Deletes a relayed endpoint and what it still held.
    pub async fn delete_relay(&self, tenant: &TenantId, id: &WebhookId) -> Result<(), WebhookError> {
        let mut conn = self.redis.shared();
        let () = conn.del(self.keys.webhook_relay(tenant, id.as_str())).await?;
        self.delete(tenant, id).await
    }
}

fn relayed_entry(entry: &redis::streams::StreamId) -> Option<Relayed> {
    let text = |field: &str| entry.get::<String>(field);
    Some(Relayed {
        entry: entry.id.clone(),
        msg_id: text("id")?,
        timestamp: text("timestamp")?.parse().ok()?,
        signature: text("signature")?,
        body: text("body")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_relay_targets_name_a_relayed_endpoint() {
        assert_eq!(relayed_endpoint("relay:whk_01"), Some("whk_01"));
        assert_eq!(relayed_endpoint("https://example.com/relay:whk_01"), None);
    }
}
