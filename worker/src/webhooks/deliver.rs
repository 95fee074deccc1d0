//! The deliverer: posts one due message to its endpoint, signed as Standard
//! Webhooks, and records what came of it. A 2xx within [`TIMEOUT`] is
//! success; `410 Gone` disables the endpoint; anything else (another status,
//! a redirect, which is never followed, a refused target, a timeout) is
//! retried after the configured waits with ±20 % jitter, then fails. An
//! attempt holds one of its endpoint's slots ([`super::due`]) for at most
//! [`Deliverer::attempt_limit`].

use std::time::{Duration, Instant};

use rand::Rng;

use flotilla_queue::webhooks::due::Taken;
use flotilla_queue::webhooks::relay::{relayed_endpoint, Relayed};
use flotilla_queue::webhooks::target::Refusal;
use flotilla_queue::webhooks::{signing, AttemptRecord, DeliveryStatus, Message, Next, Webhooks};
use flotilla_queue::QueueError;
use flotilla_types::clock;

use super::client;

/// How long a receiver has to answer.
pub const TIMEOUT: Duration = Duration::from_secs(15);
/// Time beyond [`TIMEOUT`] an attempt has to record its outcome.
const RECORD_MARGIN: Duration = Duration::from_secs(5);
/// How much of an answer's body is read (and then dropped).
const BODY_LIMIT: usize = 4 * 1024;

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Delivered(u16),
    /// `410 Gone`: the receiver wants no more.
    Gone,
    Failed {
        code: Option<u16>,
        reason: String,
    },
}

/// Delivers messages.
#[derive(Clone)]
pub struct Deliverer {
    hooks: Webhooks,
    client: reqwest::Client,
}

impl Deliverer {
    /// A deliverer whose client resolves names with `hooks`' lookup; fails
    /// only when no HTTP client can be built (no TLS backend).
    pub fn new(hooks: Webhooks) -> Result<Self, reqwest::Error> {
        let client = client::client(hooks.policy(), hooks.lookup(), TIMEOUT)?;
        Ok(Self { hooks, client })
    }

    pub fn hooks(&self) -> &Webhooks {
        &self.hooks
    }

    /// How long an attempt holds its endpoint's slot at most: the request's
    /// timeout and the time to record its outcome.
    pub fn attempt_limit() -> Duration {
        TIMEOUT + RECORD_MARGIN
    }

    /// Makes one attempt at a message, which the caller took for a lease
    /// and an attempt slot ([`Webhooks::take_due`]).
    pub async fn deliver(&self, taken: &Taken) -> Result<(), QueueError> {
        let Some(message) = self.hooks.message(&taken.id).await? else {
            return self.hooks.forget_due(taken).await;
        };
        if message.status != "pending" {
            return self.hooks.forget_due(taken).await;
        }
        let endpoint = match self.hooks.stored(&message.tenant, &message.endpoint).await {
            Ok(endpoint) => endpoint,
            Err(_) => return self.hooks.settle(&message, taken, "the endpoint was deleted").await,
        };
        if endpoint.view.disabled {
            return self.hooks.settle(&message, taken, "the endpoint is disabled").await;
        }
        let now = clock::now_ms();
        let secrets = endpoint.signing_secrets(now);
        let started = Instant::now();
        let outcome = match relayed_endpoint(&endpoint.view.url) {
            Some(relay) => self.relay(&message, relay, &secrets, now / 1000).await,
            None => self.post(&endpoint.view.url, &message, &secrets, now / 1000).await,
        };
        let latency_ms = started.elapsed().as_millis() as u64;
        let (record, next) = self.judge(&message, &outcome, latency_ms);
        if outcome == Outcome::Gone {
            let reason = "the receiver answered 410 Gone";
            self.hooks.disable(&message.tenant, &message.endpoint, reason).await?;
        }
        tracing::debug!(msg_id = %message.id, ?outcome, latency_ms, "webhook attempt");
        self.hooks.record_attempt(&message, taken, &record, next).await
    }

    /// What to record, and what comes next.
    fn judge(&self, message: &Message, outcome: &Outcome, latency_ms: u64) -> (AttemptRecord, Next) {
        match outcome {
            Outcome::Delivered(code) => {
                (AttemptRecord { response_code: Some(*code), latency_ms, error: None }, Next::Done(DeliveryStatus::Succeeded))
            }
            Outcome::Gone => (
                AttemptRecord { response_code: Some(410), latency_ms, error: Some("410 Gone: the endpoint is disabled".into()) },
                Next::Done(DeliveryStatus::Failed),
            ),
            Outcome::Failed { code, reason } => {
                let record = AttemptRecord { response_code: *code, latency_ms, error: Some(reason.clone()) };
                let retries = &self.hooks.config().retries;
                let next = match retries.get(message.attempts as usize) {
                    Some(wait) => Next::RetryAt(clock::now_ms() + jittered(*wait).as_millis() as i64),
                    None => Next::Done(DeliveryStatus::Failed),
                };
                (record, next)
            }
        }
    }

    /// Hands the message, signed, to the API that relays it to a listener
    /// (`flotilla webhooks listen`): written is delivered.
    async fn relay(&self, message: &Message, endpoint: &str, secrets: &[&str], timestamp: i64) -> Outcome {
        let body = message.body.as_bytes();
        let delivery = Relayed {
            entry: String::new(),
            msg_id: message.id.to_string(),
            timestamp,
            signature: signing::signature_header(secrets.iter().copied(), message.id.as_str(), timestamp, body),
            body: message.body.clone(),
        };
        match self.hooks.relay(&message.tenant, endpoint, &delivery).await {
            Ok(()) => Outcome::Delivered(200),
            Err(error) => Outcome::Failed { code: None, reason: format!("the relay was not written: {error}") },
        }
    }

    /// Posts the message once.
    async fn post(&self, url: &str, message: &Message, secrets: &[&str], timestamp: i64) -> Outcome {
        let url = match self.hooks.policy().check_url(url) {
            Ok(url) => url,
            Err(refusal) => return refused(&refusal),
        };
        let signature =
            signing::signature_header(secrets.iter().copied(), message.id.as_str(), timestamp, message.body.as_bytes());
        let sent = self
            .client
            .post(url)
            .header("content-type", "application/json")
            .header("webhook-id", message.id.as_str())
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(message.body.clone())
            .send()
            .await;
        let mut response = match sent {
            Ok(response) => response,
            Err(error) => return failure(&error),
        };
        let status = response.status();
        let mut read = 0;
        while read < BODY_LIMIT {
            match response.chunk().await {
                Ok(Some(chunk)) => read += chunk.len(),
                _ => break,
            }
        }
        let code = status.as_u16();
        if status.is_success() {
            Outcome::Delivered(code)
        } else if code == 410 {
            Outcome::Gone
        } else if status.is_redirection() {
            let to = response.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or("?").to_owned();
            Outcome::Failed { code: Some(code), reason: format!("redirect ({code}) to {to} not followed") }
        } else {
            Outcome::Failed { code: Some(code), reason: format!("the receiver answered {code}") }
        }
    }
}

fn refused(refusal: &Refusal) -> Outcome {
    Outcome::Failed { code: None, reason: format!("refused: {refusal}") }
}

/// A failed request's reason: the refusal of the target when that is what
/// stopped it, else the transport's error.
fn failure(error: &reqwest::Error) -> Outcome {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if let Some(refusal) = e.downcast_ref::<Refusal>() {
            return refused(refusal);
        }
        source = e.source();
    }
    if error.is_timeout() {
        return Outcome::Failed { code: None, reason: format!("no answer within {} s", TIMEOUT.as_secs()) };
    }
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(e) = source {
        reason = format!("{reason}: {e}");
        source = e.source();
    }
    Outcome::Failed { code: None, reason }
}

/// `wait` ± 20 %.
fn jittered(wait: Duration) -> Duration {
    wait.mul_f64(rand::rng().random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..100 {
            let d = jittered(Duration::from_secs(100));
            assert!(d >= Duration::from_secs(80) && d <= Duration::from_secs(120), "{d:?}");
        }
    }
}
