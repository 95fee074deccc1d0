//! One attempt at a task, as the worker running it sees it. Every write goes
//! through a fenced script carrying the attempt number and worker id, so an
//! attempt that lost its task (its worker was presumed dead and another took
//! over) is refused with [`QueueError::Fenced`] instead of overwriting.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use super::fair_scripts::{FinishAndAckGroup, FinishContext};
use super::Runner;
use super::{fair_scripts, origin, scripts, Delivery, Queue};
use crate::error::QueueError;
use crate::keys::{Shard, GROUP};
use flotilla_types::clock;
use flotilla_types::event::{draft, draft_at, event_body, EventKind, EventOrigin};
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::redact::redact;
use flotilla_types::route::Capabilities;
use flotilla_types::task::{HumanInput, StopCode, TaskSpec};
use flotilla_types::usage::USAGE_TTL_S;
use flotilla_types::usage::{Added, Amount, Counted};

/// The error a task gets when the worker of its last attempt vanished.
const WORKER_VANISHED: &str = "attempts exhausted: the worker running the last attempt stopped responding";

/// How a task ended, as the queue counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
    Cancelled,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Why a delivery started nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skipped {
    /// The task's hash is gone (expired or deleted).
    Gone,
    /// A second new entry of a task that runs already.
    Duplicate,
    /// A cancel was waiting for it: it is cancelled now (and counted).
    Cancelled,
    /// Its attempts were spent: it is dead-lettered now (and counted).
    Dead,
    /// The entry names no valid task.
    Malformed,
}

/// What a delivery turned into.
#[derive(Debug)]
pub enum StartOutcome {
    /// This worker now runs the attempt.
    Started(Box<Attempt>),
    /// Nothing to run; the entry can be acknowledged.
    Nothing(Skipped),
    /// The task had ended but this entry was still pending: it was
    /// cancelled while queued, it is a second delivery of a task another
    /// entry already ran, or (`from_this_entry`) the worker that ended the
    /// task from this very entry stopped before acknowledging it. Acknowledge
    /// it, counting `outcome` only in that last case: acknowledging counts an
    /// outcome only for an entry still pending, so it is counted once.
    AlreadyEnded { outcome: Outcome, from_this_entry: bool },
}

/// The [`fair_scripts::AckGroup`] of a delivered entry and its outcome.
pub(super) fn ack_group(delivery: &Delivery, outcome: Option<Outcome>) -> fair_scripts::AckGroup<'_> {
    fair_scripts::AckGroup {
        tenant: delivery.tenant.as_str(),
        route: &delivery.route,
        lane: delivery.lane.lane_number(),
        entry_id: &delivery.entry_id,
        outcome: outcome.map_or("", Outcome::as_str),
    }
}

/// An attempt, how it ends its task, and when (epoch ms).
pub type Ending<'a> = (&'a Attempt, Terminal, i64);

/// A fenced script's reply: the seq it wrote, or -1 as [`QueueError::Fenced`].
fn written_seq(seq: i64) -> Result<u64, QueueError> {
    u64::try_from(seq).map_err(|_| QueueError::Fenced)
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

/// How an attempt ends its task.
#[derive(Debug, Clone, PartialEq)]
pub enum Terminal {
    Succeeded(serde_json::Value),
    Failed(StopCode, String),
    Cancelled,
}

impl Terminal {
    /// The outcome counted in the queue's figures.
    pub fn outcome(&self) -> Outcome {
        match self {
            Terminal::Succeeded(_) => Outcome::Succeeded,
            Terminal::Failed(..) => Outcome::Failed,
            Terminal::Cancelled => Outcome::Cancelled,
        }
    }

    /// The terminal event and what the task hash records: status, code, and
    /// the result or error field with its value; no field (empty) for a
    /// null result, which a record reads as null anyway.
    fn written(&self) -> (EventKind, &'static str, &'static str, &'static str, String) {
        match self {
            Terminal::Succeeded(result) => {
                let code = StopCode::Done.as_str();
                (
                    EventKind::Succeeded { code: code.into(), result: result.clone() },
                    "succeeded",
                    code,
                    if result.is_null() { "" } else { "result" },
                    result.to_string(),
                )
            }
            Terminal::Failed(code, error) => {
                let code = code.as_str();
                let error = redact(error).into_owned();
                (EventKind::Failed { code: code.into(), error: error.clone() }, "failed", code, "error", error)
            }
            Terminal::Cancelled => {
                let code = StopCode::Cancelled.as_str();
                (EventKind::Cancelled { code: code.into() }, "cancelled", code, "", String::new())
            }
        }
    }
}

/// The outcome to count for a task found ended at start.
fn ended_outcome(status: Option<&String>) -> Outcome {
    match status.map(String::as_str) {
        Some("succeeded") => Outcome::Succeeded,
        Some("cancelled") => Outcome::Cancelled,
        _ => Outcome::Failed,
    }
}

/// The leading arguments of the start scripts (`ARGV[1..7]` of
/// [`scripts::START`]).
struct StartArgs {
    channel_prefix: String,
    started: String,
    now: i64,
    owner: String,
    cancelled: String,
    failed: String,
    retention_ms: u64,
}

impl StartArgs {
    fn new(queue: &Queue, owner: &str) -> Self {
        let now = clock::now_ms();
        Self {
            channel_prefix: queue.script_channels(),
            started: draft(EventKind::Started { attempt: 0, worker: owner.to_owned() }),
            now,
            owner: owner.to_owned(),
            cancelled: draft(EventKind::Cancelled { code: StopCode::Cancelled.as_str().into() }),
            failed: draft(EventKind::Failed { code: StopCode::Problem.as_str().into(), error: WORKER_VANISHED.into() }),
            retention_ms: queue.retention_ms(),
        }
    }

    fn add_to(&self, inv: &mut redis::ScriptInvocation<'_>) {
        inv.arg(&self.channel_prefix)
            .arg(&self.started)
            .arg(self.now)
            .arg(&self.owner)
            .arg(&self.cancelled)
            .arg(&self.failed)
            .arg(self.retention_ms);
    }
}

/// What starting a task changed beyond its hash, to count after.
enum Unstarted {
    /// Its attempts were spent: it goes to the tenant's dead letters.
    Dead(TenantId, TaskId),
    /// A cancel was waiting for it.
    Cancelled(TenantId),
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
    /// The W3C `traceparent` of the request that submitted the task, so its
    /// work continues that trace.
    pub trace: Option<String>,
}

impl Queue {
    /// Takes turns and starts the tasks in one round trip: up to `count`
    /// entries. Only on a single server (one shard): a cluster claims with
    /// [`Runner::claim_turns`] and starts with [`Runner::start_many`].
    pub(super) async fn claim_and_start(
        &self,
        owner: &str,
        caps: &Capabilities,
        count: usize,
    ) -> Result<Vec<(Delivery, Result<StartOutcome, QueueError>)>, QueueError> {
        let shard = Shard(0);
        let mut inv = fair_scripts::CLAIM_AND_START.prepare_invoke();
        inv.key(self.keys.sched(shard));
        StartArgs::new(self, owner).add_to(&mut inv);
        inv.arg(GROUP).arg(count).arg(self.keys.task_prefix()).arg(self.keys.shard_base(shard)).arg(&caps.script_args());
        let mut conn = self.redis.shared();
        // Per entry: lane index, entry id, task id, tenant, route, then the
        // start's reply, all in one list.
        let claimed: Vec<String> = inv.invoke_async(&mut conn).await?;
        if !claimed.len().is_multiple_of(fair_scripts::CLAIM_ROW) {
            return Err(QueueError::Corrupt(format!("claim answered {} values", claimed.len())));
        }
        let mut counted = Vec::new();
        let mut outcomes = Vec::with_capacity(claimed.len() / fair_scripts::CLAIM_ROW);
        for row in claimed.chunks_exact(fair_scripts::CLAIM_ROW) {
            let [lane, entry_id, task, tenant, route, reply @ ..] = row else {
                return Err(QueueError::Corrupt(format!("claim answered {row:?}")));
            };
            let Some(delivery) = Delivery::from_reply((lane, entry_id.clone(), task, tenant, route.clone()), false) else {
                continue;
            };
            let outcome = match &delivery.task_id {
                Some(task_id) => self.read_start_reply(&delivery, task_id, owner, reply, &mut counted),
                None => Ok(StartOutcome::Nothing(Skipped::Malformed)),
            };
            outcomes.push((delivery, outcome));
        }
        self.count_unstarted(counted).await?;
        Ok(outcomes)
    }

    fn read_start_reply(
        &self,
        delivery: &Delivery,
        task_id: &TaskId,
        owner: &str,
        reply: &[String],
        counted: &mut Vec<Unstarted>,
    ) -> Result<StartOutcome, QueueError> {
        let corrupt = || QueueError::Corrupt(format!("task {task_id}: start answered {reply:?}"));
        match reply.first().map(String::as_str) {
            Some("started") => {
                let number = reply.get(1).and_then(|n| n.parse().ok()).ok_or_else(corrupt)?;
                let spec: TaskSpec = reply.get(2).and_then(|s| serde_json::from_str(s).ok()).ok_or_else(corrupt)?;
                let tenant = reply.get(3).and_then(|t| TenantId::parse(t).ok()).ok_or_else(corrupt)?;
                let batch = reply.get(4).filter(|b| !b.is_empty()).and_then(|b| BatchId::parse(b).ok());
                let origin = origin(task_id, batch.as_ref(), &tenant);
                let trace = reply.get(5).filter(|t| !t.is_empty()).cloned();
                let attempt = Attempt {
                    queue: self.clone(),
                    origin,
                    owner: owner.to_owned(),
                    number,
                    spec,
                    delivery: delivery.clone(),
                    trace,
                };
                Ok(StartOutcome::Started(Box::new(attempt)))
            }
            Some("dead") => {
                let tenant = reply.get(2).and_then(|t| TenantId::parse(t).ok()).ok_or_else(corrupt)?;
                counted.push(Unstarted::Dead(tenant, task_id.clone()));
                Ok(StartOutcome::Nothing(Skipped::Dead))
            }
            Some("cancelled") => {
                counted.push(Unstarted::Cancelled(delivery.tenant.clone()));
                Ok(StartOutcome::Nothing(Skipped::Cancelled))
            }
            Some("gone") => Ok(StartOutcome::Nothing(Skipped::Gone)),
            Some("duplicate") => Ok(StartOutcome::Nothing(Skipped::Duplicate)),
            Some("terminal") => Ok(StartOutcome::AlreadyEnded {
                outcome: ended_outcome(reply.get(1)),
                from_this_entry: reply.get(2) == Some(&delivery.entry_id),
            }),
            _ => Err(corrupt()),
        }
    }

    /// Records tasks that ended at start: dead letters and late cancels.
    async fn count_unstarted(&self, counted: Vec<Unstarted>) -> Result<(), QueueError> {
        if counted.is_empty() {
            return Ok(());
        }
        let mut cmds = Vec::new();
        let mut ended = Vec::new();
        for change in &counted {
            match change {
                Unstarted::Dead(tenant, id) => {
                    cmds.push(redis::Cmd::zadd(self.keys.dead(tenant), id.as_str(), clock::now_ms()));
                    cmds.push(redis::Cmd::hincr(self.keys.tenant_outcomes(tenant), "failed", 1));
                    cmds.push(redis::Cmd::hincr(self.keys.tenant_outcomes(tenant), "dead", 1));
                    ended.push((tenant, "failed"));
                }
                Unstarted::Cancelled(tenant) => {
                    cmds.push(redis::Cmd::hincr(self.keys.tenant_outcomes(tenant), "cancelled", 1));
                    ended.push((tenant, "cancelled"));
                }
            }
        }
        let _: Vec<redis::Value> = self.redis.query_many(cmds).await?;
        self.runner().count_outcomes(&ended).await
    }

    async fn dead_letter(&self, tenant: &TenantId, id: &TaskId) -> Result<(), QueueError> {
        let cmds = vec![
            redis::Cmd::zadd(self.keys.dead(tenant), id.as_str(), clock::now_ms()),
            redis::Cmd::hincr(self.keys.tenant_outcomes(tenant), "dead", 1),
        ];
        let _: Vec<redis::Value> = self.redis.query_many(cmds).await?;
        Ok(())
    }

    /// Counts the tasks these endings did end in their tenants' usage.
    async fn count_endings(&self, ends: &[Ending<'_>], seqs: &[i64]) -> Result<(), QueueError> {
        let ended: Vec<(&TenantId, &'static str)> = ends
            .iter()
            .zip(seqs)
            .filter(|(_, seq)| **seq >= 0)
            .map(|((attempt, terminal, _), _)| (attempt.tenant(), terminal.outcome().as_str()))
            .collect();
        self.runner().count_outcomes(&ended).await
    }

    /// The keys and arguments of [`fair_scripts::FINISH_AND_ACK`]'s
    /// endings: what many endings share (worker, status, code, result or
    /// error field, tenant, batch, route, lane) once per call as a context
    /// of [`fair_scripts::FINISH_CONTEXT`] values, their number first; then
    /// per ending [`fair_scripts::FINISH_AND_ACK_GROUP`] values: its
    /// context's number (from 1), task id, attempt, event body,
    /// `finished_at`, entry id and the field's value.
    fn add_endings_with_contexts(&self, inv: &mut redis::ScriptInvocation<'_>, ends: &[Ending<'_>]) {
        let mut contexts: Vec<FinishContext<'_>> = Vec::new();
        let mut per_task = Vec::with_capacity(ends.len());
        for (attempt, terminal, at_ms) in ends {
            let (kind, status, code, field, value) = terminal.written();
            let delivery = &attempt.delivery;
            let batch = attempt.origin.batch_id.as_ref().map_or("", |b| b.as_str());
            let context = FinishContext {
                owner: attempt.owner.as_str(),
                status,
                code,
                field,
                tenant: attempt.tenant().as_str(),
                batch,
                route: delivery.route.as_str(),
                lane: delivery.lane.lane_number(),
            };
            let number = match contexts.iter().position(|c| *c == context) {
                Some(i) => i + 1,
                None => {
                    contexts.push(context);
                    contexts.len()
                }
            };
            inv.key(self.keys.task(attempt.task_id()));
            per_task.push((number, attempt, event_body(&attempt.origin, &draft_at(kind, *at_ms)), *at_ms, value));
        }
        inv.arg(contexts.len());
        for context in contexts {
            inv.arg(context);
        }
        for (context, attempt, body, finished_at, value) in per_task {
            inv.arg(FinishAndAckGroup {
                context,
                id: attempt.task_id().as_str(),
                attempt: attempt.number,
                body: &body,
                finished_at,
                entry_id: &attempt.delivery.entry_id,
                value: &value,
            });
        }
    }

    /// The keys and the [`scripts::FINISH_GROUP`] arguments of one ending.
    fn add_ending(&self, inv: &mut redis::ScriptInvocation<'_>, (attempt, terminal, at_ms): &Ending<'_>) {
        let id = attempt.task_id();
        let (kind, status, code, field, value) = terminal.written();
        let batch = attempt.origin.batch_id.as_ref().map_or("", |b| b.as_str());
        inv.key(self.keys.task(id));
        inv.arg(scripts::FinishGroup {
            id: id.as_str(),
            attempt: attempt.number,
            owner: &attempt.owner,
            body: &event_body(&attempt.origin, &draft_at(kind, *at_ms)),
            status,
            code,
            field,
            value: &value,
            finished_at: *at_ms,
            tenant: attempt.tenant().as_str(),
            batch,
        });
    }
}

impl Runner<'_> {
    /// Starts the next attempt of the delivered task for worker `owner`.
    pub async fn start(self, delivery: &Delivery, owner: &str) -> Result<StartOutcome, QueueError> {
        self.start_many(std::slice::from_ref(delivery), owner).await?.pop().unwrap_or(Ok(StartOutcome::Nothing(Skipped::Gone)))
    }

    /// Starts the next attempt of each delivered task, in one round trip.
    pub async fn start_many(
        self,
        deliveries: &[Delivery],
        owner: &str,
    ) -> Result<Vec<Result<StartOutcome, QueueError>>, QueueError> {
        let with_task: Vec<(&Delivery, &TaskId)> = deliveries.iter().filter_map(|d| d.task_id.as_ref().map(|t| (d, t))).collect();
        let args = StartArgs::new(&self, owner);
        let calls: Vec<_> = with_task
            .chunks(self.tasks_per_call(usize::MAX))
            .map(|chunk| {
                let mut inv = scripts::START.prepare_invoke();
                args.add_to(&mut inv);
                for (delivery, task_id) in chunk {
                    let reclaimed = if delivery.reclaimed { "1" } else { "" };
                    inv.key(self.keys.task(task_id));
                    inv.arg(scripts::StartGroup { id: task_id.as_str(), reclaimed, entry: &delivery.entry_id });
                }
                inv
            })
            .collect();
        let replies: Vec<Vec<String>> = self.invoke_each::<Vec<Vec<String>>>(&calls).await?.concat();
        let mut replies = replies.into_iter();
        let mut outcomes = Vec::with_capacity(deliveries.len());
        let mut counted = Vec::new();
        for delivery in deliveries {
            let Some(task_id) = &delivery.task_id else {
                outcomes.push(Ok(StartOutcome::Nothing(Skipped::Malformed)));
                continue;
            };
            let Some(reply) = replies.next() else { break };
            outcomes.push(self.read_start_reply(delivery, task_id, owner, &reply, &mut counted));
        }
        self.count_unstarted(counted).await?;
        Ok(outcomes)
    }

    /// Ends many attempts in one round trip; each ended at the epoch ms given
    /// with it. Each result is the terminal event's seq, or
    /// [`QueueError::Fenced`]. Their entries stay pending: see
    /// [`Runner::finish_and_ack`].
    pub async fn finish_many(self, ends: &[Ending<'_>]) -> Result<Vec<Result<u64, QueueError>>, QueueError> {
        if ends.is_empty() {
            return Ok(Vec::new());
        }
        let calls: Vec<_> = ends
            .chunks(self.tasks_per_call(usize::MAX))
            .map(|chunk| {
                let mut inv = scripts::FINISH.prepare_invoke();
                inv.arg(self.script_channels()).arg(self.retention_ms());
                for ending in chunk {
                    self.add_ending(&mut inv, ending);
                }
                inv
            })
            .collect();
        let seqs: Vec<i64> = self.invoke_each::<Vec<i64>>(&calls).await?.concat();
        self.count_endings(ends, &seqs).await?;
        Ok(seqs.into_iter().map(written_seq).collect())
    }

    /// Ends attempts and acknowledges their entries, with `acks`: entries
    /// that only need acknowledging, each with the outcome to count, if
    /// any. A task's outcome is counted when its attempt ends it — on a
    /// single server in the same atomic step, so a task is counted once
    /// however often it was delivered. An entry whose task another attempt
    /// owns stays pending. Each result is the terminal event's seq, or
    /// [`QueueError::Fenced`].
    pub async fn finish_and_ack(
        self,
        ends: &[Ending<'_>],
        acks: &[(Delivery, Option<Outcome>)],
    ) -> Result<Vec<Result<u64, QueueError>>, QueueError> {
        if self.redis.is_cluster() {
            let written = self.finish_many(ends).await?;
            let mut settled = acks.to_vec();
            for ((attempt, terminal, _), result) in ends.iter().zip(&written) {
                if result.is_ok() {
                    settled.push((attempt.delivery.clone(), Some(terminal.outcome())));
                }
            }
            self.ack(&settled).await?;
            return Ok(written);
        }
        if ends.is_empty() && acks.is_empty() {
            return Ok(Vec::new());
        }
        let shard = Shard(0);
        let mut inv = fair_scripts::FINISH_AND_ACK.prepare_invoke();
        inv.key(self.keys.sched(shard)).key(self.keys.outcomes(shard)).key(self.keys.ended());
        inv.arg(self.script_channels()).arg(self.retention_ms()).arg(GROUP).arg(ends.len()).arg(self.keys.shard_base(shard));
        let (day_before, day_after) = self.keys.usage_day_around(&clock::utc_day(self.now_ms()));
        let totals_after = if self.settings.tenant_totals { self.keys.usage_total_after() } else { "" };
        inv.arg(day_before).arg(day_after).arg(USAGE_TTL_S).arg(totals_after);
        self.add_endings_with_contexts(&mut inv, ends);
        for (delivery, outcome) in acks {
            inv.arg(ack_group(delivery, *outcome));
        }
        let mut conn = self.redis.shared();
        let seqs: Vec<i64> = inv.invoke_async(&mut conn).await?;
        Ok(seqs.into_iter().map(written_seq).collect())
    }

    /// The delay before retry number `attempt + 1`: exponential with jitter.
    pub fn retry_delay(self, attempt: u32) -> Duration {
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

    /// The queue the attempt belongs to, for reads beyond its own task
    /// (such as the earlier task a follow-up continues).
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// Renews the lease, and learns of cancels and takeovers.
    pub async fn heartbeat(&self) -> Result<HeartbeatOutcome, QueueError> {
        let q = &self.queue;
        let mut conn = q.redis.shared();
        let answer: String =
            scripts::HEARTBEAT.key(q.keys.task(self.task_id())).arg(self.number).arg(&self.owner).invoke_async(&mut conn).await?;
        match answer.as_str() {
            "fenced" => Ok(HeartbeatOutcome::Fenced),
            "cancel" => Ok(HeartbeatOutcome::CancelRequested),
            _ => {
                q.runner().touch(&self.owner, &self.delivery).await?;
                Ok(HeartbeatOutcome::Renewed)
            }
        }
    }

    /// Puts the task in `waiting` with `code`, announcing why; the attempt
    /// keeps its lease (and its sandbox) while a human decides.
    pub async fn wait_for_human(&self, code: StopCode, message: &str) -> Result<u64, QueueError> {
        let event = EventKind::Waiting { code: code.as_str().to_owned(), message: message.to_owned() };
        self.emit(event, &[("status", "waiting".to_owned()), ("code", code.as_str().to_owned())]).await
    }

    /// The input a human gave the waiting task, if any yet; taking it marks
    /// the task running again and records an `input` event (a hand-back's
    /// `released` event is recorded by the release). Nothing is handed out
    /// while a person holds the desktop.
    pub async fn take_input(&self) -> Result<Option<HumanInput>, QueueError> {
        let mut conn = self.queue.redis.shared();
        let (kind, json): (String, String) = scripts::TAKE_INPUT
            .key(self.queue.keys.task(self.task_id()))
            .arg(self.number)
            .arg(&self.owner)
            .invoke_async(&mut conn)
            .await?;
        let parse = |json: &str| -> Result<HumanInput, QueueError> {
            serde_json::from_str(json).map_err(|e| QueueError::Corrupt(format!("input: {e}")))
        };
        match kind.as_str() {
            "none" => Ok(None),
            "fenced" => Err(QueueError::Fenced),
            "cancel" => Err(QueueError::Cancelled),
            "release" => Ok(Some(parse(&json)?)),
            _ => {
                let input = parse(&json)?;
                self.emit(EventKind::Input { decision: input.decision, message: input.message.clone() }, &[]).await?;
                Ok(Some(input))
            }
        }
    }

    /// Counts what the attempt spent on its task and its tenant's day; the
    /// task's counters after, and where the tenant's tokens of today stand.
    pub async fn add_usage(&self, amounts: &[Amount]) -> Result<Counted, QueueError> {
        let q = &self.queue;
        match q.runner().add_usage(q.keys.task(self.task_id()), self.tenant(), self.number, &self.owner, amounts).await? {
            Added::Counted(counted) => Ok(counted),
            Added::Fenced => Err(QueueError::Fenced),
        }
    }

    /// Whether a person took the task's desktop over (or handed it back
    /// and the attempt has not taken up the hand-back yet): the attempt
    /// pauses until it takes the hand-back's input.
    pub async fn held_by_person(&self) -> Result<bool, QueueError> {
        let mut conn = self.queue.redis.shared();
        let (takeover, released): (Option<String>, Option<String>) = redis::cmd("HMGET")
            .arg(self.queue.keys.task(self.task_id()))
            .arg("takeover")
            .arg("released")
            .query_async(&mut conn)
            .await?;
        Ok(takeover.as_deref() == Some("1") || released.as_deref() == Some("1"))
    }

    /// Sets task fields (like its token `usage`) without an event.
    pub async fn set_fields(&self, fields: &[(&str, String)]) -> Result<(), QueueError> {
        let mut conn = self.queue.redis.shared();
        let mut inv = scripts::SET_FIELDS.key(self.queue.keys.task(self.task_id()));
        inv.arg(self.number).arg(&self.owner);
        for (field, value) in fields {
            inv.arg(*field).arg(value);
        }
        let answer: String = inv.invoke_async(&mut conn).await?;
        if answer == "fenced" {
            return Err(QueueError::Fenced);
        }
        Ok(())
    }

    /// Records a progress event and sets task fields with it.
    pub async fn emit(&self, kind: EventKind, fields: &[(&str, String)]) -> Result<u64, QueueError> {
        let mut inv = self.fenced(&scripts::EMIT, kind);
        for (field, value) in fields {
            inv.arg(*field).arg(value);
        }
        self.run_fenced(inv).await
    }

    /// Ends the task.
    pub async fn finish(&self, terminal: Terminal) -> Result<u64, QueueError> {
        self.queue.runner().finish_many(&[(self, terminal, clock::now_ms())]).await?.pop().unwrap_or(Err(QueueError::Fenced))
    }

    /// Ends the task as succeeded.
    pub async fn succeed(&self, result: serde_json::Value) -> Result<u64, QueueError> {
        self.finish(Terminal::Succeeded(result)).await
    }

    /// Ends the task as failed, without retry.
    pub async fn fail(&self, code: StopCode, error: &str) -> Result<u64, QueueError> {
        self.finish(Terminal::Failed(code, error.to_owned())).await
    }

    /// Ends the task as cancelled.
    pub async fn cancelled(&self) -> Result<u64, QueueError> {
        self.finish(Terminal::Cancelled).await
    }

    /// A retryable failure: schedules the next attempt after a backoff, or,
    /// when attempts are spent, fails the task into the dead-letter list.
    /// Returns the delay when a retry was scheduled.
    pub async fn retry_or_dead_letter(&self, error: &str) -> Result<Option<Duration>, QueueError> {
        let error = redact(error);
        let error = error.as_ref();
        if self.number >= self.spec.max_attempts() {
            self.fail(StopCode::Problem, &format!("attempts exhausted: {error}")).await?;
            self.queue.dead_letter(self.tenant(), self.task_id()).await?;
            return Ok(None);
        }
        let delay = self.queue.runner().retry_delay(self.number);
        let due = clock::now_ms() + delay.as_millis() as i64;
        let kind = EventKind::Retrying { attempt: self.number + 1, delay_ms: delay.as_millis() as u64, error: error.into() };
        let mut inv = self.fenced(&scripts::RETRY, kind);
        inv.arg("error").arg(error).arg("retry_at").arg(due);
        self.run_fenced(inv).await?;
        let q = &self.queue;
        let mut inv = q.shard_call(&fair_scripts::DEFER, q.keys.shard_of(self.tenant()));
        inv.arg(self.tenant().as_str()).arg(self.spec.priority().lane_number()).arg(self.task_id().as_str()).arg(due);
        inv.arg(&self.delivery.route);
        let mut conn = q.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(Some(delay))
    }

    /// Hands the task back to wait until `resume_at_ms` (epoch ms by the
    /// queue's clock), when its tenant's next UTC day begins: `queued`
    /// again with a `queued` event, in its tenant's due set until then, its
    /// retries untouched. The caller acknowledges the entry after.
    pub async fn wait_for_next_day(&self, resume_at_ms: i64) -> Result<(), QueueError> {
        let kind = EventKind::Queued { attempt: self.number, worker: Some(self.owner.clone()) };
        self.run_fenced(self.fenced(&scripts::REQUEUE, kind)).await?;
        let q = &self.queue;
        let mut inv = q.shard_call(&fair_scripts::DEFER, q.keys.shard_of(self.tenant()));
        inv.arg(self.tenant().as_str()).arg(self.spec.priority().lane_number()).arg(self.task_id().as_str()).arg(resume_at_ms);
        inv.arg(&self.delivery.route);
        let mut conn = q.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }

    fn fenced(&self, script: &'static redis::Script, kind: EventKind) -> redis::ScriptInvocation<'static> {
        let mut inv = self.queue.task_invocation(script, self.task_id(), &draft(kind), clock::now_ms());
        inv.arg(self.number).arg(&self.owner);
        inv
    }

    async fn run_fenced(&self, inv: redis::ScriptInvocation<'_>) -> Result<u64, QueueError> {
        let mut conn = self.queue.redis.shared();
        let seq: i64 = inv.invoke_async(&mut conn).await?;
        written_seq(seq)
    }
}
