//! Every Redis key and pub/sub channel Flotilla uses, in one place.
//!
//! All keys start with the configured prefix, so tests (and several fleets)
//! share one Redis without colliding. Hash tags keep what one script touches
//! in one cluster slot: a task is one hash, under `{task id}`;
//! all lanes, due sets and queue counters share `{q}`; a tenant's index,
//! dead letters and idempotency records share `{tenant}`; a batch's record
//! and task list share `{batch id}`; every schedule key shares `{s}`.

use crate::ids::{BatchId, ScheduleId, TaskId, TenantId};
use crate::task::Priority;

/// The consumer group every worker reads the lanes with.
pub const GROUP: &str = "workers";

/// The task-hash field holding the task's event number `seq`.
pub fn event_field(seq: u64) -> String {
    format!("e:{seq}")
}

/// Names of keys and channels under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Hash: a task's spec and state (`status`, `attempt`, `owner`, `seq`, …)
    /// and its events, each under [`event_field`].
    pub fn task(&self, id: &TaskId) -> String {
        format!("{}{{{id}}}", self.task_prefix())
    }

    /// What every task key starts with, for the single-server scripts that
    /// make task keys from ids: `<task prefix>{<id>}`.
    pub fn task_prefix(&self) -> String {
        format!("{}:task:", self.prefix)
    }

    /// Stream: the lane of one priority; entries carry only a task id (`t`).
    pub fn lane(&self, priority: Priority) -> String {
        format!("{}:{{q}}:lane:{}", self.prefix, priority.as_str())
    }

    /// String with a TTL: `tenant` stored the screen with content hash
    /// `hash` (its `dedup` flag is per tenant).
    pub fn tenant_screen(&self, tenant: &TenantId, hash: &str) -> String {
        format!("{}:{{{tenant}}}:screen:{hash}", self.prefix)
    }

    /// Sorted set: task ids of one lane by the epoch ms they become due
    /// (retries after backoff, and `not_before`).
    pub fn due(&self, priority: Priority) -> String {
        format!("{}:{{q}}:due:{}", self.prefix, priority.as_str())
    }

    /// Hash: fleet-wide counters of finished tasks by outcome.
    pub fn outcomes(&self) -> String {
        format!("{}:{{q}}:outcomes", self.prefix)
    }

    /// Sorted set: tasks a worker ended on a single server, by when they
    /// ended; each is deleted once the retention has passed (a task ended
    /// elsewhere expires through its own TTL).
    pub fn finished(&self) -> String {
        format!("{}:{{q}}:finished", self.prefix)
    }

    /// Set: every tenant that ever submitted a task, for housekeeping.
    pub fn tenants(&self) -> String {
        format!("{}:{{q}}:tenants", self.prefix)
    }

    /// Sorted set (all scores 0): a tenant's task ids, which sort by time.
    pub fn tenant_tasks(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:tasks", self.prefix)
    }

    /// Sorted set: a tenant's dead-lettered task ids by the epoch ms they died.
    pub fn dead(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:dead", self.prefix)
    }

    /// String with a 24 h TTL: `task id` and body hash behind an idempotency key.
    pub fn idempotency(&self, tenant: &TenantId, key_digest: &str) -> String {
        format!("{}:tenant:{{{tenant}}}:idem:{key_digest}", self.prefix)
    }

    /// Hash: a batch's `tenant`, `created_at`, `total` and, once every task
    /// has ended, `finished_at`.
    pub fn batch(&self, id: &BatchId) -> String {
        format!("{}:batch:{{{id}}}", self.prefix)
    }

    /// List: a batch's task ids in the order they were given.
    pub fn batch_tasks(&self, id: &BatchId) -> String {
        format!("{}:batch:{{{id}}}:tasks", self.prefix)
    }

    /// Sorted set: batches with tasks still to end, by the epoch ms they were
    /// last looked at; the janitor seals them once every task has ended.
    pub fn open_batches(&self) -> String {
        format!("{}:{{q}}:batches:open", self.prefix)
    }

    /// Hash: a schedule's rule, task spec and firing state. Every schedule
    /// key shares `{s}`, so one script moves a schedule's hash and its place
    /// in the due set together; schedules are few and fire at most once a
    /// minute, so one slot carries them easily.
    pub fn schedule(&self, id: &ScheduleId) -> String {
        format!("{}:{{s}}:schedule:{id}", self.prefix)
    }

    /// Sorted set: active schedule ids by the epoch ms they are next due.
    pub fn schedules_due(&self) -> String {
        format!("{}:{{s}}:due", self.prefix)
    }

    /// Sorted set (all scores 0): a tenant's schedule ids, which sort by time.
    pub fn tenant_schedules(&self, tenant: &TenantId) -> String {
        format!("{}:{{s}}:tenant:{tenant}", self.prefix)
    }

    /// Sorted set: the sandboxes the fleet holds of one provider, each a
    /// slot member scored by the epoch ms (Redis time) its holder's lease on
    /// it ends; the fleet-wide cap counts the unexpired members.
    pub fn sandbox_slots(&self, provider: &str) -> String {
        format!("{}:{{sandboxes}}:{provider}:slots", self.prefix)
    }

    /// String: the grant of one live-view token, under the SHA-256 of the
    /// token (hex); expires with the token.
    pub fn view_token(&self, digest: &str) -> String {
        format!("{}:view:token:{digest}", self.prefix)
    }

    /// String: the URL of the worker serving a task's live view.
    pub fn view_route(&self, id: &TaskId) -> String {
        format!("{}:view:route:{id}", self.prefix)
    }

    /// What every event channel name starts with.
    pub fn channel_prefix(&self) -> String {
        format!("{}:events:", self.prefix)
    }

    /// Channel: every event of one task.
    pub fn task_channel(&self, id: &TaskId) -> String {
        format!("{}:events:task:{id}", self.prefix)
    }

    /// Channel: every event of the tasks of one batch.
    pub fn batch_channel(&self, id: &BatchId) -> String {
        format!("{}:events:batch:{id}", self.prefix)
    }

    /// Channel: every event of one tenant's tasks.
    pub fn tenant_channel(&self, tenant: &TenantId) -> String {
        format!("{}:events:tenant:{tenant}", self.prefix)
    }

    /// The pattern matching every tenant's channel: one subscription to it
    /// sees every event once.
    pub fn tenant_channel_pattern(&self) -> String {
        format!("{}:events:tenant:*", self.prefix)
    }

    /// Stream: every event of one tenant's tasks in the order they
    /// happened, each entry `e` the event JSON; the entry id is the
    /// tenant feed's position. The task scripts append to it on a single
    /// server (its name is made there from the channel prefix); it is
    /// trimmed to the retention window by housekeeping.
    pub fn tenant_feed(&self, tenant: &TenantId) -> String {
        format!("{}:events:feed:{{{tenant}}}", self.prefix)
    }

    /// Hash: one webhook endpoint of a tenant (`url`, `events`, `batch`,
    /// `disabled`, `secret`, `old_secret`, `old_until`, `created_at`).
    pub fn webhook(&self, tenant: &TenantId, id: &str) -> String {
        format!("{}:tenant:{{{tenant}}}:webhook:{id}", self.prefix)
    }

    /// Sorted set (all scores 0): a tenant's webhook ids, which sort by time.
    pub fn tenant_webhooks(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:webhooks", self.prefix)
    }

    /// Set: tenants with at least one webhook endpoint, whose feeds the
    /// dispatcher reads.
    pub fn webhook_tenants(&self) -> String {
        format!("{}:{{w}}:tenants", self.prefix)
    }

    /// Hash: one webhook message to one endpoint and its delivery state.
    pub fn webhook_message(&self, msg: &str) -> String {
        format!("{}:{{w}}:msg:{msg}", self.prefix)
    }

    /// Sorted set: message ids by the epoch ms their next attempt is due
    /// (a message being sent is pushed a lease ahead).
    pub fn webhook_due(&self) -> String {
        format!("{}:{{w}}:due", self.prefix)
    }

    /// Sorted set (all scores 0): an endpoint's message ids, which sort by time.
    pub fn webhook_deliveries(&self, endpoint: &str) -> String {
        format!("{}:{{w}}:deliveries:{endpoint}", self.prefix)
    }

    /// Set: the tasks of a batch whose terminal event the webhook dispatcher
    /// has seen, to tell when the batch has completed.
    pub fn batch_ended(&self, id: &BatchId) -> String {
        format!("{}:batch:{{{id}}}:ended", self.prefix)
    }

    /// What the task scripts take as their first argument: the channel
    /// prefix, followed by `+` when they also append each event to its
    /// tenant's feed stream (a single server; on a cluster the stream is in
    /// another slot than the task).
    pub fn script_channels(&self, feed: bool) -> String {
        if feed {
            format!("{}+", self.channel_prefix())
        } else {
            self.channel_prefix()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_follow_the_contract_under_the_default_prefix() {
        let keys = Keys::new("flotilla");
        let id = TaskId::parse("tsk_01jc0000000000000000000000").expect("id");
        assert_eq!(keys.task_channel(&id), "flotilla:events:task:tsk_01jc0000000000000000000000");
        let tenant = TenantId::parse("acme").expect("tenant");
        assert_eq!(keys.tenant_channel(&tenant), "flotilla:events:tenant:acme");
    }

    #[test]
    fn keys_used_together_share_a_slot() {
        let keys = Keys::new("p");
        let tag = |k: &str| k[k.find('{').expect("tag")..=k.find('}').expect("tag")].to_owned();
        assert_eq!(tag(&keys.lane(Priority::High)), tag(&keys.due(Priority::Low)));
        let batch = BatchId::generate();
        assert_eq!(tag(&keys.batch(&batch)), tag(&keys.batch_tasks(&batch)));
        let schedule = ScheduleId::generate();
        let tenant = TenantId::parse("acme").expect("tenant");
        assert_eq!(tag(&keys.schedule(&schedule)), tag(&keys.schedules_due()));
        assert_eq!(tag(&keys.schedule(&schedule)), tag(&keys.tenant_schedules(&tenant)));
    }
}
