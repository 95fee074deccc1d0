//! The task handle: what a pipeline may do with the task it runs, and
//! nothing more. The executor holds the attempt (its lease, its fenced
//! terminal writes, the acknowledgement of its entry) and lends the
//! pipeline a [`TaskHandle`]: the spec, the task's own progress (events,
//! usage, waiting for a human), the reads replay and resume need, the
//! tenant's settings and the records of the tenant's sandboxes. Ending the
//! task is not among them, so a pipeline cannot write a terminal state: it
//! returns an outcome, and the executor writes it.
//!
//! The handle is a trait so that pipeline pieces run without Redis in unit
//! tests; `crate::execute::AttemptHandle` is the one over a running
//! attempt.

#[cfg(test)]
pub(crate) mod fake;

use flotilla_config::TenantSettings;
use flotilla_queue::queue::{Parked, TaskRecord};
use flotilla_queue::QueueError;
use flotilla_types::eval_plan::RunPlace;
use flotilla_types::event::EventKind;
use flotilla_types::ids::{TaskId, TenantId};
use flotilla_types::task::{HumanInput, StopCode, TaskSpec};
use flotilla_types::usage::{Amount, Counted};
use futures::future::BoxFuture;
use time::OffsetDateTime;

use crate::sandbox::SandboxId;

/// What a pipeline may do with its task.
///
/// A pipeline reports its progress and reads what it needs through the
/// handle:
///
/// ```no_run
/// use flotilla_worker::pipeline::TaskHandle;
/// use flotilla_worker::PipelineError;
///
/// async fn step(task: &dyn TaskHandle) -> Result<(), PipelineError> {
///     task.add_usage(&[]).await?;
///     Ok(())
/// }
/// ```
///
/// and has no way to end the task: only the executor writes `succeeded`,
/// `failed`, `cancelled`, a retry or a requeue, from the outcome the
/// pipeline returns. The same pipeline calling a terminal write does not
/// compile, since the handle has no such method:
///
/// ```compile_fail,E0599
/// use flotilla_worker::pipeline::TaskHandle;
/// use flotilla_worker::PipelineError;
///
/// async fn step(task: &dyn TaskHandle) -> Result<(), PipelineError> {
///     task.add_usage(&[]).await?;
///     task.succeed(serde_json::json!({})).await?;
///     Ok(())
/// }
/// ```
///
/// nor does reaching past the handle for the queue that could (each of
/// these differs from the first example only by the call it adds):
///
/// ```compile_fail,E0599
/// use flotilla_worker::pipeline::TaskHandle;
/// use flotilla_worker::PipelineError;
///
/// async fn step(task: &dyn TaskHandle) -> Result<(), PipelineError> {
///     task.add_usage(&[]).await?;
///     task.queue();
///     Ok(())
/// }
/// ```
pub trait TaskHandle: Send + Sync {
    /// What the task asks for.
    fn spec(&self) -> &TaskSpec;

    fn task_id(&self) -> &TaskId;

    fn tenant(&self) -> &TenantId;

    /// Which attempt at the task this is, from 1.
    fn attempt_number(&self) -> u32;

    /// Where the task sits in its batch's run plan (`repeat`, `best_of`,
    /// `matrix`); `None` outside one.
    fn run_place(&self) -> Option<&RunPlace> {
        None
    }

    /// The settings of the task's tenant.
    fn tenant_settings(&self) -> TenantSettings;

    /// Records a progress event and sets task fields with it.
    fn emit<'a>(&'a self, kind: EventKind, fields: &'a [(&'a str, String)]) -> BoxFuture<'a, Result<u64, QueueError>>;

    /// Counts what the attempt spent on its task and its tenant's day; the
    /// task's counters after, and where the tenant's tokens of today stand.
    fn add_usage<'a>(&'a self, amounts: &'a [Amount]) -> BoxFuture<'a, Result<Counted, QueueError>>;

    /// Puts the task in `waiting` with `code`, announcing why; the task
    /// keeps its lease (and its sandbox) while a human decides.
    fn wait_for_human<'a>(&'a self, code: StopCode, message: &'a str) -> BoxFuture<'a, Result<u64, QueueError>>;

    /// The input a human gave the waiting task, if any yet.
    fn take_input(&self) -> BoxFuture<'_, Result<Option<HumanInput>, QueueError>>;

    /// Hands the waiting task back parked: no owner, no lane entry, still
    /// `waiting` (see `flotilla_queue::queue::Parked`).
    fn park(&self) -> BoxFuture<'_, Result<Parked, QueueError>>;

    /// Puts the task back in `waiting` with `code` without announcing it
    /// again: the attempt that takes a parked task up waits on where the
    /// parked one waited.
    fn rejoin_wait(&self, code: StopCode) -> BoxFuture<'_, Result<(), QueueError>>;

    /// The step journal an earlier attempt left (see
    /// [`journal`](super::journal)), as stored.
    fn journal(&self) -> BoxFuture<'_, Result<Option<String>, QueueError>>;

    /// Replaces the task's step journal (empty: drops it); fenced like
    /// every write of the attempt.
    fn write_journal<'a>(&'a self, journal: &'a str) -> BoxFuture<'a, Result<(), QueueError>>;

    /// Whether a person holds the task's desktop (or handed it back and
    /// the hand-back was not taken up yet).
    fn held_by_person(&self) -> BoxFuture<'_, Result<bool, QueueError>>;

    /// The record of task `id` when it is the same tenant's; `None` for
    /// another tenant's task as for one that does not exist.
    fn task_record<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<TaskRecord>, QueueError>>;

    /// The stored events of the same tenant's task `id` after seq `after`.
    fn events_after<'a>(&'a self, id: &'a TaskId, after: u64) -> BoxFuture<'a, Result<Vec<String>, QueueError>>;

    /// Whether the tenant stored the screenshot `hash` before (recording
    /// that it has now): the `dedup` flag as the tenant may see it.
    fn tenant_stored_before<'a>(&'a self, hash: &'a str) -> BoxFuture<'a, Result<bool, QueueError>>;

    /// Records the tenant as the owner of `provider`'s sandbox `id` until
    /// `until`.
    fn record_sandbox_owner<'a>(
        &'a self,
        provider: &'a str,
        id: &'a SandboxId,
        until: OffsetDateTime,
    ) -> BoxFuture<'a, Result<(), QueueError>>;

    /// Whether the tenant owns `provider`'s sandbox `id` now.
    fn owns_sandbox<'a>(&'a self, provider: &'a str, id: &'a SandboxId) -> BoxFuture<'a, Result<bool, QueueError>>;

    /// Drops the owner record of a sandbox that has ended.
    fn forget_sandbox_owner<'a>(&'a self, provider: &'a str, id: &'a SandboxId) -> BoxFuture<'a, Result<(), QueueError>>;

    /// Counts the sandbox `kept` (`<provider>:<id>`), left running after
    /// its task, against the tenant's `max_sandboxes` until `until_ms`.
    fn keep_sandbox<'a>(&'a self, kept: &'a str, until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>>;

    /// Holds the slot of the kept sandbox the task runs in at least until
    /// `until_ms`.
    fn hold_kept_sandbox<'a>(&'a self, kept: &'a str, until_ms: i64) -> BoxFuture<'a, Result<(), QueueError>>;

    /// Gives back the slot of a kept sandbox found gone.
    fn forget_kept_sandbox<'a>(&'a self, kept: &'a str) -> BoxFuture<'a, Result<(), QueueError>>;
}
