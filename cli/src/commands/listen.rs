//! `flotilla webhooks listen`: receives the tenant's webhook deliveries
//! through the API's relay (`GET /v1/webhooks/listen`), so a laptop with no
//! inbound port can try webhooks. Each delivery is checked against its
//! Standard Webhooks signature with the secret the stream opened with; one
//! that does not match is reported and dropped. A checked delivery is
//! printed (the event type and the task or batch it is about; the body with
//! `--json`) and, with `--forward-to`, posted on with its headers as a
//! receiver would get it. The API deletes the temporary endpoint when the
//! command stops.

use flotilla_types::signing;
use reqwest::Url;
use serde_json::{json, Value};

use super::{Format, Outcome};
use crate::args::ListenArgs;
use crate::client::Client;
use crate::display::{out, warn};
use flotilla_client::sse::{SseEvent, SseParser};

/// A delivery as the relay passes it on.
struct Delivery {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

impl Delivery {
    fn read(data: &str) -> Option<Self> {
        let value: Value = serde_json::from_str(data).ok()?;
        let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            id: field("webhook-id")?,
            timestamp: field("webhook-timestamp")?,
            signature: field("webhook-signature")?,
            body: field("body")?,
        })
    }

    fn signed_by(&self, secret: &str) -> bool {
        let Ok(timestamp) = self.timestamp.parse::<i64>() else { return false };
        signing::verify(secret, &self.id, timestamp, self.body.as_bytes(), &self.signature)
    }

    /// `task.succeeded tsk_…` (or the batch a `batch.completed` is about):
    /// the `id` of the record the delivery carries (a task's, a batch's),
    /// else its `task_id` or `batch_id`.
    fn summary(&self) -> String {
        let body: Value = serde_json::from_str(&self.body).unwrap_or_default();
        let kind = body.get("type").and_then(Value::as_str).unwrap_or("?");
        let data = body.get("data").cloned().unwrap_or_default();
        let about = ["id", "task_id", "batch_id"].iter().find_map(|k| data.get(*k).and_then(Value::as_str)).unwrap_or("");
        format!("{kind:<16} {about}  ({})", self.id)
    }
}

pub async fn run(client: &Client, args: &ListenArgs, format: Format) -> anyhow::Result<Outcome> {
    let forward = args.forward_to.as_deref().map(forward_url).transpose()?;
    let mut url = client.url(&["v1", "webhooks", "listen"]);
    if !args.events.is_empty() {
        url.query_pairs_mut().append_pair("events", &args.events.join(","));
    }
    if let Some(batch) = &args.batch {
        url.query_pairs_mut().append_pair("batch_id", batch);
    }
    let mut response = client.open_stream(url, None).await?;
    let mut parser = SseParser::default();
    let mut listener = Listener { secret: None, forward, http: reqwest::Client::new(), format };
    while let Some(chunk) = response.chunk().await.map_err(|e| client.transport_error(&e))? {
        for event in parser.push(&chunk) {
            listener.take(&event).await?;
        }
    }
    warn("the API ended the stream (its lifetime, or it stopped); run the command again to go on listening");
    Ok(Outcome::Success)
}

fn forward_url(text: &str) -> anyhow::Result<Url> {
    let url = Url::parse(text).map_err(|e| anyhow::anyhow!("--forward-to {text:?}: {e}"))?;
    anyhow::ensure!(matches!(url.scheme(), "http" | "https"), "--forward-to {text:?}: expected an http:// or https:// URL");
    Ok(url)
}

struct Listener {
    secret: Option<String>,
    forward: Option<Url>,
    http: reqwest::Client,
    format: Format,
}

impl Listener {
    async fn take(&mut self, event: &SseEvent) -> anyhow::Result<()> {
        match event.event.as_deref() {
            Some("ready") => self.ready(&event.data),
            Some("delivery") => match Delivery::read(&event.data) {
                Some(delivery) => self.deliver(&delivery).await,
                None => {
                    warn("an unreadable delivery was skipped");
                    Ok(())
                }
            },
            _ => Ok(()),
        }
    }

    fn ready(&mut self, data: &str) -> anyhow::Result<()> {
        let value: Value = serde_json::from_str(data).unwrap_or_default();
        let text = |name: &str| value.get(name).and_then(Value::as_str).unwrap_or("").to_owned();
        let (id, secret) = (text("id"), text("secret"));
        match self.format {
            Format::Json => out(&json!({"listening": id, "secret": secret}).to_string())?,
            Format::Human => {
                out(&format!("listening as {id}: your tenant's deliveries come here until you stop (Ctrl-C)"))?;
                out(&format!("signing secret {secret} (deliveries are checked against it)"))?;
            }
        }
        self.secret = Some(secret);
        Ok(())
    }

    async fn deliver(&self, delivery: &Delivery) -> anyhow::Result<()> {
        let Some(secret) = self.secret.as_deref() else {
            warn("a delivery came before the stream said its secret; skipped");
            return Ok(());
        };
        if !delivery.signed_by(secret) {
            warn(&format!("rejected {}: its signature does not match the secret", delivery.id));
            return Ok(());
        }
        match self.format {
            Format::Json => out(&delivery.body)?,
            Format::Human => out(&format!("verified  {}", delivery.summary()))?,
        }
        if let Some(url) = &self.forward {
            self.forward_to(url, delivery).await;
        }
        Ok(())
    }

    /// Posts the delivery on as its receiver would get it.
    async fn forward_to(&self, url: &Url, delivery: &Delivery) {
        let sent = self
            .http
            .post(url.clone())
            .header("content-type", "application/json")
            .header("webhook-id", &delivery.id)
            .header("webhook-timestamp", &delivery.timestamp)
            .header("webhook-signature", &delivery.signature)
            .body(delivery.body.clone())
            .send()
            .await;
        match sent {
            Ok(answer) => warn(&format!("  forwarded to {url}: {}", answer.status())),
            Err(error) => warn(&format!("  forwarding to {url} failed: {error}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(secret: &str, body: &str) -> Delivery {
        let signature = signing::signature_header([secret], "msg_1", 1700000000, body.as_bytes());
        Delivery { id: "msg_1".into(), timestamp: "1700000000".into(), signature, body: body.into() }
    }

    #[test]
    fn a_delivery_is_taken_only_with_the_streams_secret() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = r#"{"type": "task.succeeded", "data": {"task_id": "tsk_1"}}"#;
        assert!(delivery(secret, body).signed_by(secret));
        assert!(!delivery("whsec_c2VjcmV0c2VjcmV0", body).signed_by(secret));
        let mut forged = delivery(secret, body);
        forged.body = body.replace("succeeded", "failed");
        assert!(!forged.signed_by(secret));
        assert_eq!(delivery(secret, body).summary(), "task.succeeded   tsk_1  (msg_1)");
        let record = r#"{"type": "task.waiting", "data": {"id": "tsk_2", "batch_id": "bat_1", "status": "waiting"}}"#;
        assert_eq!(delivery(secret, record).summary(), "task.waiting     tsk_2  (msg_1)", "the task, not its batch");
    }

    #[test]
    fn only_http_urls_are_forwarded_to() {
        assert!(forward_url("http://127.0.0.1:3000/hooks").is_ok());
        assert!(forward_url("ftp://127.0.0.1/").is_err());
        assert!(forward_url("not a url").is_err());
    }
}
