//! When each message is attempted: one due queue per endpoint, and at most
//! [`PER_ENDPOINT`] attempts at one endpoint at once, fleet-wide.
//!
//! So one endpoint that never answers holds [`PER_ENDPOINT`] attempts for a
//! timeout each and nothing more: its backlog waits in its own queue, and
//! every other endpoint's messages are taken as soon as they are due.
//!
//! Layout (all under `{w}`, see [`crate::keys`]): `due` holds endpoints by
//! when they next need a look (their earliest due message, or, when all
//! their slots are taken, when the oldest attempt must have ended);
//! `due:<endpoint>` its pending messages by due time; `inflight:<endpoint>`
//! the attempts under way by their deadline. Taking a message leases it
//! (pushes it [`LEASE_MS`] ahead in its queue) and takes a slot until the
//! attempt's deadline; [`Webhooks::release`] gives the slot back and wakes
//! the endpoint. A deliverer killed midway leaves a slot that lapses at its
//! deadline and a message that comes due again when its lease ends.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use super::Webhooks;
use crate::error::QueueError;
use crate::redis_lua;
use flotilla_types::clock;
use flotilla_types::ids::MessageId;

/// Attempts at one endpoint under way at once, across the fleet.
pub const PER_ENDPOINT: usize = 8;
/// How long a taken message is not taken again (longer than one attempt).
pub const LEASE_MS: i64 = 60_000;
/// Endpoints looked at per take, at most.
const ENDPOINTS_PER_TAKE: usize = 256;

/// Takes due messages, endpoint by endpoint. `KEYS[1]` the endpoint set;
/// `ARGV`: now, the lease's end, the attempt deadline, how many messages at
/// most, the slots per endpoint, endpoints to look at, the key prefix of
/// the per-endpoint keys (`<prefix>:{w}:`). Returns endpoint, message pairs.
pub(crate) static TAKE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/take_due.lua")], &[]));

/// Ends an attempt (or a message): frees its slot, and either drops the
/// message from its endpoint's queue (`ARGV[3]` empty) or makes it due at
/// `ARGV[3]`; then sets when the endpoint needs a look. `KEYS`: the
/// endpoint's queue, its in-flight set, the endpoint set; `ARGV`: the
/// message id, the endpoint id, the next attempt (ms) or empty.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/release_due.lua")], &[]));

/// A message taken for an attempt, with the endpoint it is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub endpoint: String,
    pub id: MessageId,
}

impl Webhooks {
    /// Adds the commands that make message `id` of `endpoint` due at `at_ms`.
    pub(super) fn schedule(&self, pipe: &mut redis::Pipeline, endpoint: &str, id: &str, at_ms: i64) {
        pipe.zadd(self.keys.webhook_endpoint_due(endpoint), id, at_ms).ignore();
        pipe.cmd("ZADD").arg(self.keys.webhook_due()).arg("LT").arg(at_ms).arg(endpoint).ignore();
    }

    /// Takes up to `most` due messages, each for a lease and an attempt
    /// slot of its endpoint; an attempt must end within `attempt`.
    pub async fn take_due(&self, most: usize, attempt: Duration) -> Result<Vec<Taken>, QueueError> {
        let now = clock::now_ms();
        let mut inv = TAKE.prepare_invoke();
        inv.key(self.keys.webhook_due());
        inv.arg(now).arg(now + LEASE_MS).arg(now + attempt.as_millis() as i64).arg(most).arg(PER_ENDPOINT);
        inv.arg(ENDPOINTS_PER_TAKE).arg(self.keys.webhook_base());
        let flat: Vec<String> = inv.invoke_async(&mut self.redis.shared()).await?;
        Ok(flat
            .chunks_exact(2)
            .filter_map(|pair| Some(Taken { endpoint: pair[0].clone(), id: MessageId::parse(&pair[1]).ok()? }))
            .collect())
    }

    /// Frees the slot of `taken`'s attempt; the message is due again at
    /// `next_ms`, or, with `None`, leaves its endpoint's queue.
    pub async fn release(&self, taken: &Taken, next_ms: Option<i64>) -> Result<(), QueueError> {
        let mut inv = RELEASE.prepare_invoke();
        inv.key(self.keys.webhook_endpoint_due(&taken.endpoint))
            .key(self.keys.webhook_in_flight(&taken.endpoint))
            .key(self.keys.webhook_due());
        inv.arg(taken.id.as_str()).arg(&taken.endpoint).arg(next_ms.map(|at| at.to_string()).unwrap_or_default());
        let _: i64 = inv.invoke_async(&mut self.redis.shared()).await?;
        Ok(())
    }
}
