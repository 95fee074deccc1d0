//! Parking a task that waits for a person: its attempt hands it back with
//! no owner and no lane entry (so nothing claims it, no lease runs out on
//! it, and it holds no running slot of its tenant), its status still
//! `waiting`; the answer, a takeover or a cancel makes it claimable again
//! in the same script that records it, and the caller then puts it in its
//! lane through the due set, as a retry is. Each transition is one fenced
//! script on the task's hash, so two answers racing hand it out once.
//!
//! Invariant: a parked task is in no lane and owned by no attempt until
//! exactly one unparking script wakes it. Guarded by `lua_scripts::park`,
//! `lua_scripts::give_input` and
//! `durable_parking::a_task_waiting_for_approval_is_parked_and_goes_on_in_the_same_desktop_on_another_worker`.

use std::sync::LazyLock;

use flotilla_types::clock;
use flotilla_types::ids::{TaskId, TenantId};
use redis::Script;

use super::{fair_scripts, Attempt, Queue};
use crate::error::QueueError;
use crate::redis_lua;

/// The owning attempt's task handed back parked. `KEYS[1]` the task hash;
/// `ARGV[1]` attempt, `ARGV[2]` worker id, `ARGV[3]` lane, `ARGV[4]` route.
/// Returns `parked`, `queued` (an answer or a takeover came first: it is
/// claimable at once), `cancel` (a cancel came first; nothing changed) or
/// `fenced`.
pub static PARK: LazyLock<Script> = LazyLock::new(|| redis_lua::script(&[include_str!("lua/park.lua")], &[]));

/// What a park did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parked {
    /// The task waits parked for its answer.
    Parked,
    /// The answer (or a takeover) came first: the task is back in its lane
    /// for any worker.
    Requeued,
    /// A cancel came first: the attempt ends the task.
    CancelRequested,
}

impl Attempt {
    /// Hands the waiting task back parked (see the module). The caller
    /// acknowledges the attempt's entry after, unless a cancel came first.
    pub async fn park(&self) -> Result<Parked, QueueError> {
        let q = self.queue();
        let mut conn = q.redis.shared();
        let answer: String = PARK
            .key(q.keys.task(self.task_id()))
            .arg(self.number)
            .arg(self.worker())
            .arg(self.delivery.lane.lane_number())
            .arg(&self.delivery.route)
            .invoke_async(&mut conn)
            .await?;
        match answer.as_str() {
            "parked" => Ok(Parked::Parked),
            "queued" => {
                q.defer_now(self.tenant(), self.task_id(), self.delivery.lane.lane_number(), &self.delivery.route).await?;
                Ok(Parked::Requeued)
            }
            "cancel" => Ok(Parked::CancelRequested),
            "fenced" => Err(QueueError::Fenced),
            other => Err(QueueError::Corrupt(format!("park answered {other}"))),
        }
    }
}

impl Queue {
    /// Puts task `id` in its tenant's due set for now, in lane `lane` of
    /// `route`: the next promotion moves it to the lane.
    pub(super) async fn defer_now(&self, tenant: &TenantId, id: &TaskId, lane: usize, route: &str) -> Result<(), QueueError> {
        let mut inv = self.shard_call(&fair_scripts::DEFER, self.keys.shard_of(tenant));
        inv.arg(tenant.as_str()).arg(lane).arg(id.as_str()).arg(clock::now_ms()).arg(route);
        let mut conn = self.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }

    /// When `answer` (an unparking script's reply) says a parked task
    /// woke, puts it in its lane and returns true.
    pub(super) async fn wake_if_unparked(&self, tenant: &TenantId, id: &TaskId, answer: &str) -> Result<bool, QueueError> {
        let Some(place) = answer.strip_prefix("unparked:") else { return Ok(false) };
        let (lane, route) = place.split_once(':').ok_or_else(|| QueueError::Corrupt(format!("unpark answered {answer}")))?;
        let lane: usize = lane.parse().map_err(|_| QueueError::Corrupt(format!("unpark answered lane {lane:?}")))?;
        self.defer_now(tenant, id, lane, route).await?;
        Ok(true)
    }
}
