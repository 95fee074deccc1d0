//! The feed of `GET /v1/webhooks/listen`: a relayed endpoint's signed
//! deliveries (see `flotilla_queue::webhooks::relay`), passed on to the
//! listener as they come. It opens with a `ready` frame naming the endpoint
//! and its secret, sends each delivery as a `delivery` frame (the three
//! Standard Webhooks headers and the body, exactly as signed), and deletes
//! the endpoint once the listener has gone.

use std::time::Duration;

use axum::response::sse::Event as SseEvent;
use flotilla_queue::webhooks::relay::Relayed;
use flotilla_queue::webhooks::Webhooks;
use flotilla_types::{TenantId, WebhookId};
use serde_json::json;

use super::{Client, Flow};

/// The relay stream's position before its first delivery.
const BEFORE_ANY: &str = "0";
/// How often the relay stream is read for new deliveries.
const POLL: Duration = Duration::from_millis(250);

/// One listener's relayed endpoint.
pub struct RelayFeed {
    hooks: Webhooks,
    tenant: TenantId,
    endpoint: WebhookId,
    secret: String,
    client: Client,
}

impl RelayFeed {
    pub fn new(hooks: Webhooks, tenant: TenantId, endpoint: WebhookId, secret: String, client: Client) -> Self {
        Self { hooks, tenant, endpoint, secret, client }
    }

    /// Passes deliveries on until the listener goes, then deletes the endpoint.
    pub async fn run(self) {
        let ready = json!({"id": self.endpoint, "secret": self.secret});
        // Every frame has an id (the document's frame says so): the ready
        // one the position before any delivery.
        let ready = SseEvent::default().event("ready").id(BEFORE_ANY).data(ready.to_string());
        if self.client.out.send(ready).await.is_ok() {
            self.pass_on().await;
        }
        if let Err(error) = self.hooks.delete_relay(&self.tenant, &self.endpoint).await {
            tracing::warn!(endpoint = %self.endpoint, %error, "a relayed endpoint was left; it can be deleted by hand");
        }
    }

    async fn pass_on(&self) {
        let mut after = BEFORE_ANY.to_owned();
        loop {
            match self.hooks.relayed_after(&self.tenant, self.endpoint.as_str(), &after).await {
                Ok(deliveries) => {
                    for delivery in deliveries {
                        if self.client.out.send(frame(&delivery)).await.is_err() {
                            return;
                        }
                        after = delivery.entry;
                    }
                }
                Err(error) => tracing::warn!(feed = %self.client.label, %error, "reading relayed deliveries failed"),
            }
            if self.client.pause(POLL).await == Flow::Stop {
                return;
            }
        }
    }
}

fn frame(delivery: &Relayed) -> SseEvent {
    let data = json!({
        "webhook-id": delivery.msg_id,
        "webhook-timestamp": delivery.timestamp.to_string(),
        "webhook-signature": delivery.signature,
        "body": delivery.body,
    });
    SseEvent::default().event("delivery").id(delivery.entry.clone()).data(data.to_string())
}
