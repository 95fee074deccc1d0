//! One attempt at a task, as the worker running it sees it. Every write goes
//! through a fenced script carrying the attempt number and worker id, so an
//! attempt that lost its task (its worker was presumed dead and another took
//! over) is refused with [`QueueError::Fenced`] instead of overwriting.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};
use redis::AsyncCommands;

use super::{origin, scripts, Delivery, Queue};
use crate::clock;
use crate::error::QueueError;
use crate::event::{EventKind, EventOrigin};
use crate::ids::{BatchId, TaskId, TenantId};
use crate::task::{StopCode, TaskSpec};

/// What a delivery turned into.
#[derive(Debug)]
pub enum StartOutcome {
    /// This worker now runs the attempt.
    Started(Box<Attempt>),
    /// Nothing to run: the task is gone, finished, cancelled, waiting for a
    /// human or dead-lettered. The entry can be acknowledged.
    Nothing(&'static str),
}

/// What a heartbeat learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeartbeatOutcome {
    Renewed,
    /// A user asked to cancel the task.
    CancelRequested,
    /// Another attempt owns the task now: stop at once, write nothing.
    Fenced,
}

/// A running attempt.
#[derive(Debug, Clone)]
pub struct Attempt {
    queue: Queue,
    origin: EventOrigin,
    owner: String,
    pub number: u32,
    pub spec: TaskSpec,
    pub delivery: Delivery,
}

impl Queue {
    /// Starts the next attempt of the delivered task for worker `owner`.
    pub async fn start(&self, delivery: &Delivery, owner: &str) -> Result<StartOutcome, QueueError> {
        let Some(task_id) = delivery.task_id.clone() else {
            return Ok(StartOutcome::Nothing("malformed"));
        };
        let mut conn = self.redis.shared();
        let (tenant, batch) = self.owner_of(&task_id).await?;
        let Some(tenant) = tenant else { return Ok(StartOutcome::Nothing("gone")) };
        let origin = origin(&task_id, batch.as_ref(), &tenant);
        let now = clock::now_ms();
        let started = origin.draft(EventKind::Started { attempt: 0, worker: owner.to_owned() });
        let mut inv = self.task_invocation(&scripts::START, &origin, &started, now);
        inv.arg(owner)
            .arg(now + self.settings.lease.as_millis() as i64)
            .arg(origin.draft(EventKind::Cancelled { code: StopCode::Cancelled.as_str().into() }))
            .arg(origin.draft(EventKind::Failed {
                code: StopCode::Problem.as_str().into(),
                error: "attempts exhausted: the worker running the last attempt stopped responding".into(),
            }))
            .arg(self.retention_ms());
        let reply: Vec<String> = inv.invoke_async(&mut conn).await?;
        match reply.first().map(String::as_str) {
            Some("started") => {
                let number = reply.get(1).and_then(|n| n.parse().ok()).unwrap_or(0);
                let spec = reply.get(2).and_then(|s| serde_json::from_str(s).ok());
                let Some(spec) = spec else {
                    return Err(QueueError::Corrupt(format!("task {task_id}: spec")));
                };
                Ok(StartOutcome::Started(Box::new(Attempt {
                    queue: self.clone(),
                    origin,
                    owner: owner.to_owned(),
                    number,
                    spec,
                    delivery: delivery.clone(),
                })))
            }
            Some("dead") => {
                self.dead_letter(&tenant, &task_id).await?;
                Ok(StartOutcome::Nothing("dead"))
            }
            Some("cancelled") => {
                let _: i64 = conn.hincr(self.keys.outcomes(), "cancelled", 1).await?;
                Ok(StartOutcome::Nothing("cancelled"))
            }
            Some("gone") => Ok(StartOutcome::Nothing("gone")),
            Some("terminal") => Ok(StartOutcome::Nothing("terminal")),
            Some("waiting") => Ok(StartOutcome::Nothing("waiting")),
            _ => Err(QueueError::Corrupt(format!("start answered {reply:?}"))),
        }
    }

    /// The tenant and batch of a task, read before its first fenced write so
    /// its events carry them.
    async fn owner_of(&self, id: &TaskId) -> Result<(Option<TenantId>, Option<BatchId>), QueueError> {
        let mut conn = self.redis.shared();
        let (tenant, batch): (Option<String>, Option<String>) =
            redis::cmd("HMGET").arg(self.keys.task(id)).arg("tenant").arg("batch").query_async(&mut conn).await?;
        Ok((
            tenant.and_then(|t| TenantId::parse(&t).ok()),
            batch.filter(|b| !b.is_empty()).and_then(|b| BatchId::parse(&b).ok()),
        ))
    }

    async fn dead_letter(&self, tenant: &TenantId, id: &TaskId) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let mut pipe = redis::pipe();
        pipe.zadd(self.keys.dead(tenant), id.as_str(), clock::now_ms()).ignore();
        pipe.hincr(self.keys.outcomes(), "dead", 1).ignore();
        let () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// The delay before retry number `attempt + 1`: exponential with jitter.
    pub fn retry_delay(&self, attempt: u32) -> Duration {
        ExponentialBuilder::default()
            .with_min_delay(self.settings.retry_base)
            .with_max_delay(self.settings.retry_max)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times()
            .build()
            .nth(attempt.saturating_sub(1) as usize)
            .unwrap_or(self.settings.retry_max)
    }
}

impl Attempt {
    pub fn task_id(&self) -> &TaskId {
        &self.origin.task_id
    }

    pub fn tenant(&self) -> &TenantId {
        &self.origin.tenant
    }

    pub fn origin(&self) -> &EventOrigin {
        &self.origin
    }

    pub fn worker(&self) -> &str {
        &self.owner
    }

    /// Renews the lease, and learns of cancels and takeovers.
    pub async fn heartbeat(&self) -> Result<HeartbeatOutcome, QueueError> {
        let q = &self.queue;
        let mut conn = q.redis.shared();
        let lease_until = clock::now_ms() + q.settings.lease.as_millis() as i64;
        let answer: String = scripts::HEARTBEAT
            .key(q.keys.task(self.task_id()))
            .arg(self.number)
            .arg(&self.owner)
            .arg(lease_until)
            .invoke_async(&mut conn)
            .await?;
        match answer.as_str() {
            "fenced" => Ok(HeartbeatOutcome::Fenced),
            "cancel" => Ok(HeartbeatOutcome::CancelRequested),
            _ => {
                q.touch(&self.owner, &self.delivery).await?;
                Ok(HeartbeatOutcome::Renewed)
            }
        }
    }

    /// Records a progress event and sets task fields with it.
    pub async fn emit(&self, kind: EventKind, fields: &[(&str, String)]) -> Result<u64, QueueError> {
        let mut inv = self.fenced(&scripts::EMIT, kind);
        for (field, value) in fields {
            inv.arg(*field).arg(value);
        }
        self.run_fenced(inv).await
    }

    /// Ends the task as succeeded.
    pub async fn succeed(&self, result: serde_json::Value) -> Result<u64, QueueError> {
        let code = StopCode::Done.as_str();
        let kind = EventKind::Succeeded { code: code.into(), result: result.clone() };
        self.finish(kind, &[("status", "succeeded".into()), ("code", code.into()), ("result", result.to_string())]).await
    }

    /// Ends the task as failed, without retry.
    pub async fn fail(&self, code: StopCode, error: &str) -> Result<u64, QueueError> {
        let kind = EventKind::Failed { code: code.as_str().into(), error: error.into() };
        self.finish(kind, &[("status", "failed".into()), ("code", code.as_str().into()), ("error", error.into())]).await
    }

    /// Ends the task as cancelled.
    pub async fn cancelled(&self) -> Result<u64, QueueError> {
        let code = StopCode::Cancelled.as_str();
        let kind = EventKind::Cancelled { code: code.into() };
        self.finish(kind, &[("status", "cancelled".into()), ("code", code.into())]).await
    }

    async fn finish(&self, kind: EventKind, fields: &[(&str, String)]) -> Result<u64, QueueError> {
        let mut inv = self.fenced(&scripts::FINISH, kind);
        inv.arg(self.queue.retention_ms());
        for (field, value) in fields {
            inv.arg(*field).arg(value);
        }
        self.run_fenced(inv).await
    }

    /// A retryable failure: schedules the next attempt after a backoff, or,
    /// when attempts are spent, fails the task into the dead-letter list.
    /// Returns the delay when a retry was scheduled.
    pub async fn retry_or_dead_letter(&self, error: &str) -> Result<Option<Duration>, QueueError> {
        if self.number >= self.spec.max_attempts() {
            self.fail(StopCode::Problem, &format!("attempts exhausted: {error}")).await?;
            self.queue.dead_letter(self.tenant(), self.task_id()).await?;
            return Ok(None);
        }
        let delay = self.queue.retry_delay(self.number);
        let due = clock::now_ms() + delay.as_millis() as i64;
        let kind = EventKind::Retrying { attempt: self.number + 1, delay_ms: delay.as_millis() as u64, error: error.into() };
        let mut inv = self.fenced(&scripts::RETRY, kind);
        inv.arg("error").arg(error).arg("retry_at").arg(due);
        self.run_fenced(inv).await?;
        let mut conn = self.queue.redis.shared();
        let _: i64 = conn.zadd(self.queue.keys.due(self.spec.priority()), self.task_id().as_str(), due).await?;
        Ok(Some(delay))
    }

    fn fenced(&self, script: &'static redis::Script, kind: EventKind) -> redis::ScriptInvocation<'static> {
        let draft = self.origin.draft(kind);
        let mut inv = self.queue.task_invocation(script, &self.origin, &draft, clock::now_ms());
        inv.arg(self.number).arg(&self.owner);
        inv
    }

    async fn run_fenced(&self, inv: redis::ScriptInvocation<'_>) -> Result<u64, QueueError> {
        let mut conn = self.queue.redis.shared();
        let seq: i64 = inv.invoke_async(&mut conn).await?;
        u64::try_from(seq).map_err(|_| QueueError::Fenced)
    }
}
