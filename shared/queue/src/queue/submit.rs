//! The API's side of the queue: accepting tasks (with idempotency), reading
//! them back, cancelling them and reviving dead letters.

use std::collections::{BTreeMap, HashMap};

use redis::AsyncCommands;
use sha2::{Digest, Sha256};

use super::archive::Archived;
use super::{fair_scripts, origin, scripts, Queue, StoredRecord, TaskRecord};
use super::{Housekeeper, Reader, Submitter};
use crate::error::QueueError;
use crate::keys::{event_field, Shard, GROUP};
use crate::page::{score_page, Page, ScoreCursor};
use flotilla_types::clock;
use flotilla_types::eval::Verdict;
use flotilla_types::event::{draft, EventKind};
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::route::Route;
use flotilla_types::task::{HumanInput, Priority, TaskSpec, TaskStatus};

/// A task to put in a lane: its tenant, priority, id and, when it must
/// wait, the epoch ms it becomes due.
/// A task to put into a lane: tenant, priority, id, due time, route.
type Queued<'a> = (&'a TenantId, Priority, &'a TaskId, Option<i64>, String);

/// The most events one read asks for.
const EVENTS_PER_READ: usize = 1_000;
/// The most tasks one create script call makes, so no call holds Redis long.
const CREATE_CHUNK: usize = 500;
/// How long an idempotency key holds (24 h, as the contract says).
const IDEMPOTENCY_TTL_S: u64 = 24 * 3600;
/// The most tasks one list call returns.
pub const MAX_LIST_LIMIT: usize = 500;

/// A task about to be created.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub id: TaskId,
    pub tenant: TenantId,
    pub batch: Option<BatchId>,
    pub spec: TaskSpec,
}

/// What accepting a task gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Submitted {
    pub id: TaskId,
    pub created_at_ms: i64,
    /// True when an idempotency key matched an earlier identical request.
    pub replayed: bool,
}

/// What a cancel did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelOutcome {
    /// It was queued; it is now cancelled.
    Cancelled,
    /// A worker holds it; it stops within a heartbeat.
    Cancelling,
    /// It had already ended with this status.
    AlreadyEnded(TaskStatus),
}

/// Which of a tenant's tasks to list.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub status: Option<TaskStatus>,
    /// Only tasks whose check gave this verdict.
    pub verdict: Option<Verdict>,
    pub batch: Option<BatchId>,
    pub limit: usize,
    /// Only tasks older than this one (ids sort by creation time).
    pub cursor: Option<TaskId>,
}

/// One screenshot in a task's list.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScreenshotRef {
    /// The seq of its `screenshot` event.
    pub seq: u64,
    pub hash: String,
    pub key: String,
}

/// The screenshots announced after the last `started` event: those of the
/// attempt that counts.
fn latest_attempt_screenshots(events: &[String]) -> Vec<ScreenshotRef> {
    /// The fields of a stored event this list needs.
    #[derive(serde::Deserialize)]
    struct Peek {
        seq: u64,
        #[serde(rename = "type")]
        kind: String,
        hash: Option<String>,
        key: Option<String>,
    }
    let mut shots = Vec::new();
    for raw in events {
        let Ok(event) = serde_json::from_str::<Peek>(raw) else { continue };
        match (event.kind.as_str(), event.hash, event.key) {
            ("started", _, _) => shots.clear(),
            ("screenshot", Some(hash), Some(key)) => shots.push(ScreenshotRef { seq: event.seq, hash, key }),
            _ => {}
        }
    }
    shots
}

impl Queue {
    /// Records `key` for this request, or returns the task an identical
    /// earlier request made; a different earlier body is a conflict.
    async fn claim_idempotency_key(
        &self,
        tenant: &TenantId,
        key: &str,
        spec: &TaskSpec,
        id: &TaskId,
    ) -> Result<Option<Submitted>, QueueError> {
        let redis_key = self.keys.idempotency(tenant, &hex_digest(key.as_bytes()));
        let body = hex_digest(serde_json::to_string(spec).unwrap_or_default().as_bytes());
        let mut conn = self.redis.shared();
        let value = format!("{id} {body}");
        let opts = redis::SetOptions::default()
            .conditional_set(redis::ExistenceCheck::NX)
            .with_expiration(redis::SetExpiry::EX(IDEMPOTENCY_TTL_S));
        let fresh: Option<String> = conn.set_options(&redis_key, &value, opts).await?;
        if fresh.is_some() {
            return Ok(None);
        }
        let stored: Option<String> = conn.get(&redis_key).await?;
        let Some((earlier_id, earlier_body)) = stored.as_deref().and_then(|s| s.split_once(' ')) else {
            return Err(QueueError::Corrupt("idempotency record".into()));
        };
        if earlier_body != body {
            return Err(QueueError::IdempotencyConflict);
        }
        let earlier_id = TaskId::parse(earlier_id).map_err(|_| QueueError::Corrupt("idempotency record".into()))?;
        let created_at_ms: Option<i64> = conn.hget(self.keys.task(&earlier_id), "created_at").await?;
        Ok(Some(Submitted { id: earlier_id, created_at_ms: created_at_ms.unwrap_or_else(clock::now_ms), replayed: true }))
    }

    /// The writes that list new tasks: per tenant, one `ZADD` of all its
    /// tasks to its index and one `SADD` to the set of tenants (one round
    /// trip for the lot on a single server).
    fn index_writes(&self, tasks: &[NewTask]) -> Vec<redis::Cmd> {
        let mut by_tenant: BTreeMap<&TenantId, Vec<(u8, &str)>> = BTreeMap::new();
        for task in tasks {
            by_tenant.entry(&task.tenant).or_default().push((0, task.id.as_str()));
        }
        by_tenant
            .into_iter()
            .flat_map(|(tenant, ids)| {
                [
                    redis::Cmd::zadd_multiple(self.keys.tenant_tasks(tenant), &ids),
                    redis::Cmd::sadd(self.keys.tenants(), tenant.as_str()),
                ]
            })
            .collect()
    }

    /// Puts tasks into their tenants' lanes (or due sets), one call per
    /// scheduler shard, with each tenant's settings.
    async fn enqueue(&self, tasks: &[Queued<'_>], now: i64) -> Result<(), QueueError> {
        let mut by_shard: BTreeMap<Shard, Vec<&Queued<'_>>> = BTreeMap::new();
        for task in tasks {
            by_shard.entry(self.keys.shard_of(task.0)).or_default().push(task);
        }
        let calls: Vec<_> = by_shard
            .into_iter()
            .map(|(shard, tasks)| {
                let mut inv = self.shard_call(&fair_scripts::ENQUEUE, shard);
                inv.arg(GROUP).arg(now);
                for (tenant, priority, id, due, route) in tasks {
                    let settings = self.settings.tenants.get(tenant);
                    inv.arg(fair_scripts::EnqueueGroup {
                        tenant: tenant.as_str(),
                        weight: settings.weight,
                        max_running: settings.max_running.unwrap_or(0),
                        lane: priority.lane_number(),
                        id: id.as_str(),
                        due_ms: due.unwrap_or(0),
                        route,
                    });
                }
                inv
            })
            .collect();
        let _: Vec<i64> = self.invoke_each(&calls).await?;
        Ok(())
    }

    /// The record fields of these tasks of `tenant`, in one round trip,
    /// and the archived ones from the store: empty for a gone task, `None`
    /// for an archived one whose outcome `wanted` does not let through.
    async fn task_hashes(
        &self,
        tenant: &TenantId,
        ids: &[TaskId],
        wanted: impl Fn(TaskStatus) -> bool,
    ) -> Result<Vec<Option<HashMap<String, String>>>, QueueError> {
        let reads =
            ids.iter().map(|id| redis::cmd("HMGET").arg(self.keys.task(id)).arg(&TaskRecord::FIELDS[..]).to_owned()).collect();
        let values: Vec<Vec<Option<String>>> = self.redis.query_many(reads).await?;
        let mut hashes: Vec<Option<HashMap<String, String>>> =
            values.into_iter().map(|v| Some(TaskRecord::fields_hash(v))).collect();
        let missing: Vec<usize> = (0..ids.len()).filter(|&i| hashes[i].as_ref().is_some_and(HashMap::is_empty)).collect();
        let missing_ids: Vec<&TaskId> = missing.iter().map(|&i| &ids[i]).collect();
        for (i, archived) in missing.into_iter().zip(self.archived_hashes(tenant, &missing_ids, wanted).await?) {
            match archived {
                Archived::No => {}
                Archived::Skipped => hashes[i] = None,
                Archived::Read(hash) => hashes[i] = Some(hash),
            }
        }
        Ok(hashes)
    }

    /// Drops ids whose task has expired from an index.
    async fn forget(&self, index: &str, gone: Vec<String>) -> Result<(), QueueError> {
        if gone.is_empty() {
            return Ok(());
        }
        let mut conn = self.redis.shared();
        let _: i64 = conn.zrem(index, gone).await?;
        Ok(())
    }

    /// Each task's stored events with `seq` above its `after`, as JSON
    /// text, in two round trips: the tasks' last seq, then the events.
    /// A task no longer in Redis is read from the archive, whole.
    pub(super) async fn histories(&self, tenant: &TenantId, wanted: &[(&TaskId, u64)]) -> Result<Vec<Vec<String>>, QueueError> {
        let lasts: Vec<Option<u64>> =
            self.redis.query_many(wanted.iter().map(|(id, _)| redis::Cmd::hget(self.keys.task(id), "seq")).collect()).await?;
        let missing: Vec<usize> = (0..wanted.len()).filter(|&i| lasts[i].is_none()).collect();
        let missing_ids: Vec<&TaskId> = missing.iter().map(|&i| wanted[i].0).collect();
        let mut archived: HashMap<usize, HashMap<String, String>> = HashMap::new();
        for (i, found) in missing.into_iter().zip(self.archived_hashes(tenant, &missing_ids, |_| true).await?) {
            if let Archived::Read(hash) = found {
                archived.insert(i, hash);
            }
        }
        let mut reads = Vec::new();
        let mut read_for = Vec::new();
        for (i, ((id, after), last)) in wanted.iter().zip(lasts).enumerate() {
            let fields: Vec<String> = (after + 1..=last.unwrap_or(0)).map(event_field).collect();
            for chunk in fields.chunks(EVENTS_PER_READ) {
                reads.push(redis::cmd("HMGET").arg(self.keys.task(id)).arg(chunk).to_owned());
                read_for.push(i);
            }
        }
        let got: Vec<Vec<Option<String>>> = self.redis.query_many(reads).await?;
        let mut histories = vec![Vec::new(); wanted.len()];
        for (i, events) in read_for.into_iter().zip(got) {
            histories[i].extend(events.into_iter().flatten());
        }
        for (i, mut hash) in archived {
            let after = wanted[i].1;
            let last = hash.get("seq").and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            histories[i] = (after + 1..=last).filter_map(|seq| hash.remove(&event_field(seq))).collect();
        }
        Ok(histories)
    }
}

impl Submitter<'_> {
    /// Accepts one task, honouring its idempotency key.
    pub async fn submit(self, tenant: &TenantId, spec: TaskSpec) -> Result<Submitted, QueueError> {
        let id = TaskId::generate();
        if let Some(key) = spec.idempotency_key.as_deref() {
            if let Some(earlier) = self.claim_idempotency_key(tenant, key, &spec, &id).await? {
                return Ok(earlier);
            }
        }
        let key = spec.idempotency_key.clone();
        let created = self.create_tasks(vec![NewTask { id: id.clone(), tenant: tenant.clone(), batch: None, spec }]).await;
        match (created, key) {
            (Ok(at), _) => Ok(Submitted { id, created_at_ms: at, replayed: false }),
            (Err(e), Some(key)) => {
                // The key must not point at a task that was never made.
                let mut conn = self.redis.shared();
                let _: Result<i64, _> = conn.del(self.keys.idempotency(tenant, &hex_digest(key.as_bytes()))).await;
                Err(e)
            }
            (Err(e), None) => Err(e),
        }
    }

    /// Creates tasks and queues them: first every task's hash and event, then
    /// the tenants' indexes, then the lane entries, so no worker can be
    /// handed a task whose hash is not written yet.
    /// Returns the creation time given to them.
    pub async fn create_tasks(self, tasks: Vec<NewTask>) -> Result<i64, QueueError> {
        let now = clock::now_ms();
        if tasks.is_empty() {
            return Ok(now);
        }
        let routes = tasks.iter().map(|t| Route::of(&t.spec).map(|r| r.key())).collect::<Option<Vec<_>>>();
        let Some(routes) = routes else { return Err(QueueError::NoPipeline) };
        let queued_draft = draft(EventKind::Queued { attempt: 0, worker: None });
        let traceparent = flotilla_telemetry::current_traceparent().unwrap_or_default();
        let mut creates = Vec::new();
        for chunk in tasks.chunks(self.tasks_per_call(CREATE_CHUNK)) {
            let mut create = scripts::CREATE.prepare_invoke();
            create.arg(self.script_channels()).arg(&queued_draft).arg(now).arg(&traceparent);
            for task in chunk {
                let spec_json = serde_json::to_string(&task.spec).map_err(|e| QueueError::Corrupt(e.to_string()))?;
                create.key(self.keys.task(&task.id));
                create.arg(scripts::CreateGroup {
                    id: task.id.as_str(),
                    header: &origin(&task.id, task.batch.as_ref(), &task.tenant).header(),
                    spec: &spec_json,
                    tenant: task.tenant.as_str(),
                    batch: task.batch.as_ref().map(BatchId::as_str).unwrap_or(""),
                    max_attempts: task.spec.max_attempts(),
                });
            }
            creates.push(create);
        }
        let _created: Vec<i64> = self.invoke_each(&creates).await?;

        let _: Vec<redis::Value> = self.redis.query_many(self.index_writes(&tasks)).await?;
        let queued: Vec<Queued<'_>> = tasks
            .iter()
            .zip(routes)
            .map(|(t, route)| (&t.tenant, t.spec.priority(), &t.id, t.spec.not_before_ms().filter(|due| *due > now), route))
            .collect();
        self.enqueue(&queued, now).await?;
        Ok(now)
    }

    /// Hands a human's input to a tenant's waiting task; its worker picks it
    /// up within a moment.
    pub async fn give_input(self, tenant: &TenantId, id: &TaskId, input: &HumanInput) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let json = serde_json::to_string(input).map_err(|e| QueueError::Corrupt(e.to_string()))?;
        let answer: String =
            scripts::GIVE_INPUT.key(self.keys.task(id)).arg(tenant.as_str()).arg(json).invoke_async(&mut conn).await?;
        if self.wake_if_unparked(tenant, id, &answer).await? {
            return Ok(());
        }
        match answer.as_str() {
            "accepted" => Ok(()),
            "missing" => match self.archived_states(tenant, &[id]).await?.pop().flatten() {
                Some((status, _)) => Err(QueueError::WrongStatus(status.as_str().to_owned())),
                None => Err(QueueError::NotFound),
            },
            status => Err(QueueError::WrongStatus(status.to_owned())),
        }
    }

    /// Cancels a tenant's task.
    pub async fn cancel(self, tenant: &TenantId, id: &TaskId) -> Result<CancelOutcome, QueueError> {
        let mut conn = self.redis.shared();
        let draft = draft(EventKind::Cancelled { code: "cancelled".into() });
        let mut inv = self.task_invocation(&scripts::CANCEL, id, &draft, clock::now_ms());
        inv.arg(tenant.as_str()).arg(self.retention_ms());
        let outcome: String = inv.invoke_async(&mut conn).await?;
        if self.wake_if_unparked(tenant, id, &outcome).await? {
            return Ok(CancelOutcome::Cancelling);
        }
        match outcome.as_str() {
            "missing" => match self.archived_states(tenant, &[id]).await?.pop().flatten() {
                Some((status, _)) => Ok(CancelOutcome::AlreadyEnded(status)),
                None => Err(QueueError::NotFound),
            },
            "now-cancelled" => {
                let _: i64 = conn.hincr(self.keys.tenant_outcomes(tenant), "cancelled", 1).await?;
                self.runner().count_outcomes(&[(tenant, "cancelled")]).await?;
                Ok(CancelOutcome::Cancelled)
            }
            "cancelling" => Ok(CancelOutcome::Cancelling),
            other => TaskStatus::parse(other)
                .map(CancelOutcome::AlreadyEnded)
                .ok_or_else(|| QueueError::Corrupt(format!("cancel answered {other}"))),
        }
    }

    /// Puts a dead-lettered task back in its lane with fresh attempts.
    pub async fn revive(self, tenant: &TenantId, id: &TaskId) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let dead_index = self.keys.dead(tenant);
        let listed: Option<f64> = conn.zscore(&dead_index, id.as_str()).await?;
        if listed.is_none() {
            return Err(QueueError::NotFound);
        }
        let Some(record) = self.reader().get(tenant, id).await? else {
            return Err(QueueError::NotFound);
        };
        let route = Route::of(&record.spec).ok_or(QueueError::NoPipeline)?.key();
        let draft = draft(EventKind::Queued { attempt: 0, worker: None });
        let mut inv = self.task_invocation(&scripts::REVIVE, id, &draft, clock::now_ms());
        inv.arg(tenant.as_str());
        let outcome: String = inv.invoke_async(&mut conn).await?;
        match outcome.as_str() {
            "requeued" => {
                let _: i64 = conn.zrem(&dead_index, id.as_str()).await?;
                self.enqueue(&[(tenant, record.priority, id, None, route)], clock::now_ms()).await
            }
            "missing" => Err(QueueError::NotFound),
            other => Err(QueueError::WrongStatus(other.to_owned())),
        }
    }
}

impl Reader<'_> {
    /// A tenant's task, or `None` if it does not exist or is another tenant's.
    pub async fn get(self, tenant: &TenantId, id: &TaskId) -> Result<Option<TaskRecord>, QueueError> {
        let hash = self.task_hashes(tenant, std::slice::from_ref(id), |_| true).await?.pop().flatten().unwrap_or_default();
        Ok(TaskRecord::from_hash(id, hash)?.filter(|t| &t.tenant == tenant))
    }

    /// Several of a tenant's tasks in one round trip, in order: `None` for
    /// one that does not exist, is another tenant's or cannot be read.
    pub async fn get_many(self, tenant: &TenantId, ids: &[TaskId]) -> Result<Vec<Option<TaskRecord>>, QueueError> {
        let hashes = self.task_hashes(tenant, ids, |_| true).await?;
        Ok(ids
            .iter()
            .zip(hashes)
            .map(|(id, hash)| TaskRecord::from_hash(id, hash?).ok().flatten().filter(|t| &t.tenant == tenant))
            .collect())
    }

    /// A tenant's tasks, newest first, and the cursor of the next page.
    pub async fn list(self, tenant: &TenantId, filter: &ListFilter) -> Result<(Vec<TaskRecord>, Option<TaskId>), QueueError> {
        let limit = filter.limit.clamp(1, MAX_LIST_LIMIT);
        let index = self.keys.tenant_tasks(tenant);
        let mut conn = self.redis.shared();
        let mut found = Vec::new();
        let mut cursor = filter.cursor.clone();
        let mut gone = Vec::new();
        // A filter may skip many ids: scan a bounded number of pages.
        for _ in 0..20 {
            let max = cursor.as_ref().map_or_else(|| "+".to_owned(), |c| format!("({c}"));
            let ids: Vec<String> = redis::cmd("ZRANGE")
                .arg(&index)
                .arg(&max)
                .arg("-")
                .arg("BYLEX")
                .arg("REV")
                .arg("LIMIT")
                .arg(0)
                .arg(limit)
                .query_async(&mut conn)
                .await?;
            let page_full = ids.len() == limit;
            let ids: Vec<TaskId> = ids.iter().filter_map(|i| TaskId::parse(i).ok()).collect();
            let hashes = self.task_hashes(tenant, &ids, |s| filter.status.is_none_or(|wanted| wanted == s)).await?;
            for (id, hash) in ids.iter().zip(hashes) {
                cursor = Some(id.clone());
                // Archived with an outcome the filter does not want.
                let Some(hash) = hash else { continue };
                let Some(record) = TaskRecord::from_hash(id, hash)? else {
                    gone.push(id.as_str().to_owned());
                    continue;
                };
                let wanted = filter.status.is_none_or(|s| s == record.status)
                    && filter.verdict.is_none_or(|v| record.verdict == Some(v))
                    && filter.batch.as_ref().is_none_or(|b| record.batch_id.as_ref() == Some(b));
                if wanted {
                    found.push(record);
                    if found.len() == limit {
                        break;
                    }
                }
            }
            if found.len() == limit || !page_full {
                let next = if found.len() == limit { found.last().map(|t| t.id.clone()) } else { None };
                self.forget(&index, gone).await?;
                return Ok((found, next));
            }
        }
        self.forget(&index, gone).await?;
        Ok((found, cursor))
    }

    /// One of `tenant`'s tasks' stored events with `seq` above `after`, as
    /// JSON text.
    pub async fn events_after(self, tenant: &TenantId, id: &TaskId, after: u64) -> Result<Vec<String>, QueueError> {
        Ok(self.histories(tenant, &[(id, after)]).await?.pop().unwrap_or_default())
    }

    /// The screenshots of a task's latest attempt, in step order, read from
    /// its `screenshot` events.
    pub async fn screenshots(self, tenant: &TenantId, id: &TaskId) -> Result<Vec<ScreenshotRef>, QueueError> {
        let events = self.events_after(tenant, id, 0).await?;
        Ok(latest_attempt_screenshots(&events))
    }

    /// A page of a tenant's dead-lettered tasks, newest first, after `cursor`.
    pub async fn dead(
        self,
        tenant: &TenantId,
        limit: usize,
        cursor: Option<&ScoreCursor>,
    ) -> Result<Page<TaskRecord>, QueueError> {
        let index = self.keys.dead(tenant);
        let page = score_page(&self.redis, &index, limit.min(MAX_LIST_LIMIT), cursor).await?;
        let ids: Vec<TaskId> = page.items.iter().filter_map(|i| TaskId::parse(i).ok()).collect();
        let hashes = self.task_hashes(tenant, &ids, |_| true).await?;
        let mut records = Vec::new();
        let mut gone = Vec::new();
        for (id, hash) in ids.iter().zip(hashes) {
            match TaskRecord::from_hash(id, hash.unwrap_or_default())? {
                Some(record) => records.push(record),
                None => gone.push(id.as_str().to_owned()),
            }
        }
        self.forget(&index, gone).await?;
        Ok(Page { items: records, next_cursor: page.next_cursor })
    }
}

fn hex_digest(bytes: &[u8]) -> String {
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// How many index entries one prune pass checks per tenant.
const PRUNE_BATCH: usize = 1_000;

impl Queue {
    /// Forgets the ids whose task is neither in Redis nor in the archive.
    async fn forget_expired(&self, tenant: &TenantId, index: &str, ids: Vec<String>) -> Result<(), QueueError> {
        if ids.is_empty() {
            return Ok(());
        }
        let checks = ids
            .iter()
            .map(|id| match TaskId::parse(id) {
                Ok(task) => redis::Cmd::exists(self.keys.task(&task)),
                Err(_) => redis::Cmd::exists(format!("{}:invalid", self.keys.prefix())),
            })
            .collect();
        let alive: Vec<bool> = self.redis.query_many(checks).await?;
        let parsed: Vec<TaskId> = ids.iter().map(|id| TaskId::parse(id).unwrap_or_else(|_| TaskId::generate())).collect();
        let archived = self.are_archived(tenant, &parsed.iter().collect::<Vec<_>>()).await?;
        let gone: Vec<String> = ids
            .into_iter()
            .zip(alive.into_iter().zip(archived))
            .filter(|(_, (alive, archived))| !alive && !archived)
            .map(|(id, _)| id)
            .collect();
        self.forget(index, gone).await
    }
}

impl Housekeeper<'_> {
    /// Drops the oldest ids whose task has expired from every tenant's task
    /// and dead-letter indexes. Checks a bounded number per pass, and only
    /// ids that can have expired: a task lives at least the retention after
    /// it was made (and a dead letter after it died), so younger ids are
    /// never read and a pass costs two reads per tenant while nothing is old.
    pub async fn prune_indexes(self) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let tenants: Vec<String> = conn.smembers(self.keys.tenants()).await?;
        let cutoff = u64::try_from(clock::now_ms()).unwrap_or(0).saturating_sub(self.retention_ms());
        let made_before = format!("({}", TaskId::first_at(cutoff));
        for tenant in tenants.iter().filter_map(|t| TenantId::parse(t).ok()) {
            let index = self.keys.tenant_tasks(&tenant);
            let oldest: Vec<String> = conn.zrangebylex_limit(&index, "-", &made_before, 0, PRUNE_BATCH as isize).await?;
            self.forget_expired(&tenant, &index, oldest).await?;
            let dead_index = self.keys.dead(&tenant);
            let oldest_dead: Vec<String> = conn.zrangebyscore_limit(&dead_index, "-inf", cutoff, 0, PRUNE_BATCH as isize).await?;
            self.forget_expired(&tenant, &dead_index, oldest_dead).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(seq: u64, body: &str) -> String {
        format!(
            r#"{{"seq": {seq}, "task_id": "tsk_01J00000000000000000000000", "batch_id": null, "tenant": "acme", "ts": "2026-01-01T00:00:00Z", {body}}}"#
        )
    }

    fn shot(seq: u64, hash: &str) -> String {
        event(
            seq,
            &format!(r#""type": "screenshot", "hash": "{hash}", "key": "screenshots/{hash}.png", "bytes": 10, "dedup": false"#),
        )
    }

    #[test]
    fn the_list_holds_the_latest_attempts_screenshots_in_order() {
        let events = [
            event(1, r#""type": "queued", "attempt": 0, "worker": null"#),
            event(2, r#""type": "started", "attempt": 1, "worker": "w1""#),
            shot(3, "aa"),
            event(4, r#""type": "retrying", "attempt": 1, "delay_ms": 5, "error": "x""#),
            event(5, r#""type": "started", "attempt": 2, "worker": "w2""#),
            shot(6, "bb"),
            event(7, r#""type": "action", "action": {"type": "wait", "ms": 1}"#),
            shot(8, "cc"),
        ];
        let shots = latest_attempt_screenshots(&events);
        let seen: Vec<(u64, &str)> = shots.iter().map(|s| (s.seq, s.hash.as_str())).collect();
        assert_eq!(seen, [(6, "bb"), (8, "cc")]);
        assert_eq!(shots[0].key, "screenshots/bb.png");
    }
}
