//! Every Redis key and pub/sub channel Flotilla uses, in one place.
//!
//! All keys start with the configured prefix, so tests (and several fleets)
//! share one Redis without colliding. Hash tags keep what one script touches
//! in one cluster slot: a task is one hash, under `{task id}`; a tenant's
//! index, dead letters and idempotency records share `{tenant}`; a batch's
//! record and task list share `{batch id}`; every schedule key shares `{s}`;
//! the ended stream and the tenant set share `{q}`.
//!
//! The queue itself is split into scheduler shards, each under a hash tag
//! of its own, `{f<n>}` (one shard on a single server, [`CLUSTER_SHARDS`] on
//! a cluster, so the masters share the work). On a cluster shard `n`'s tag
//! is `f<n>` or `f<n>.<k>`, the smallest `k` whose slot lies in the `n`-th of
//! [`CLUSTER_SHARDS`] equal slices of the 16 384 slots: the shards lie
//! evenly over the slot space, so masters holding equal slot ranges hold
//! equal numbers of shards (plain `f0` … `f15` put 8 of the 16 on one of
//! three masters). A tenant belongs to one shard
//! (a hash of its name); everything the scheduler reads or writes in one
//! step lives in that shard, under the shard base `<prefix>:{f<n>}:`:
//!
//! | key | type | what |
//! |---|---|---|
//! | `sched` | hash | `clock` (virtual time of the last turn), the shard's `queued`, `running`, `delayed` |
//! | `routes` | hash | queued entries per route (routes without any are absent) |
//! | `active:<route>` | sorted set | tenants with queued tasks on the route below their `max_running`, by virtual time |
//! | `busy` | set | every tenant with entries delivered and not yet acknowledged, and maybe some with none left (its hash's `busy` says it is in; reclaim looks only here and drops those with none) |
//! | `trim` | set | tenants with acknowledged entries to trim |
//! | `wake` | sorted set | one member, `ready`, while tasks became claimable since an idle worker last looked (idle workers wait on it with `BZPOPMIN`) |
//! | `limits` | hash | `max_running` of the tenants that have one (read at once by an acknowledgement) |
//! | `outcomes` | hash | finished tasks of the shard's tenants by outcome |
//! | `tenants` | set | tenants with lanes in the shard |
//! | `due` | sorted set | `<lane>:<tenant>:<route>:<task id>` by the epoch ms it becomes due |
//! | `t:<tenant>` | hash | the tenant's `weight`, `max`, `vt`, `queued`, `running`, `delayed`, and its queued entries per lane as `<lane index>:<route>` (a field per lane it has, see [`lane_field`]) |
//! | `t:<tenant>:lane:<priority>:<route>` | stream | the tenant's lane of one priority and route, entries carry a task id (`t`) |
//! | `t:<tenant>:rate` | string | the tenant's submit-rate bucket (GCRA arrival time) |
//! | `t:<tenant>:admitting` | sorted set | room admitted requests reserved and have not filled yet |
//!
//! A route is the canonical string of what a task needs of its worker
//! (`<pipeline>|<sandbox>|<labels>`, see [`flotilla_types::route`]). Routing
//! invariant: a task's entries only ever sit in lanes of its own route, and
//! a worker reads (claims or takes over) only lanes of routes its
//! capabilities serve; live workers advertise their capabilities in
//! `{q}:workers`, which only the figures read.

use flotilla_types::ids::{BatchId, ScheduleId, TaskId, TenantId};
use flotilla_types::task::Priority;

/// The consumer group every worker reads the lanes with.
pub const GROUP: &str = "workers";

/// Scheduler shards on a Redis Cluster.
pub const CLUSTER_SHARDS: u16 = 16;

/// One scheduler shard: the hash tag a tenant's queue lives under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Shard(pub u16);

/// The task-hash field holding the task's event number `seq`.
pub fn event_field(seq: u64) -> String {
    format!("e:{seq}")
}

/// Names of keys and channels under one prefix.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
    shards: u16,
    /// Each shard's hash tag (see the module doc).
    tags: std::sync::Arc<[String]>,
}

/// Slots of a Redis Cluster.
const SLOTS: u32 = 16_384;

/// The cluster slot of a hash tag (CRC16/XMODEM, as Redis computes it).
fn slot_of(tag: &str) -> u32 {
    u32::from(crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes())) % SLOTS
}

/// Shard `n`'s tag among `shards`: `f<n>`, or `f<n>.<k>` with the smallest
/// `k` that falls in the `n`-th equal slice of the slots.
fn shard_tag(n: u16, shards: u16) -> String {
    let (lo, hi) = (u32::from(n) * SLOTS / u32::from(shards), (u32::from(n) + 1) * SLOTS / u32::from(shards));
    let in_slice = |tag: &String| (lo..hi).contains(&slot_of(tag));
    std::iter::once(format!("f{n}"))
        .chain((0u32..).map(|k| format!("f{n}.{k}")))
        .find(in_slice)
        .unwrap_or_else(|| format!("f{n}"))
}

fn shard_tags(shards: u16) -> std::sync::Arc<[String]> {
    (0..shards).map(|n| shard_tag(n, shards)).collect()
}

impl Keys {
    /// Keys under this prefix, with one scheduler shard.
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into(), shards: 1, tags: shard_tags(1) }
    }

    /// The same keys with the queue split into `shards` scheduler shards.
    pub fn with_shards(self, shards: u16) -> Self {
        let shards = shards.max(1);
        Self { shards, tags: shard_tags(shards), ..self }
    }

    /// Every scheduler shard.
    pub fn shards(&self) -> impl Iterator<Item = Shard> + use<> {
        (0..self.shards).map(Shard)
    }

    /// The shard a tenant's queue lives in (FNV-1a of its name).
    pub fn shard_of(&self, tenant: &TenantId) -> Shard {
        let hash =
            tenant.as_str().bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        Shard((hash % u64::from(self.shards)) as u16)
    }

    /// What every key of a shard starts with: `<prefix>:{<shard's tag>}:`.
    pub fn shard_base(&self, shard: Shard) -> String {
        let tag = self.tags.get(usize::from(shard.0)).map_or_else(|| format!("f{}", shard.0), Clone::clone);
        format!("{}:{{{tag}}}:", self.prefix)
    }

    /// Hash: the shard's virtual clock and totals (see the table above).
    pub fn sched(&self, shard: Shard) -> String {
        format!("{}sched", self.shard_base(shard))
    }

    /// Sorted set: the shard's wake-up signal for idle workers.
    pub fn wake(&self, shard: Shard) -> String {
        format!("{}wake", self.shard_base(shard))
    }

    /// Sorted set: the shard's tenants that may take a turn on `route`, by
    /// virtual time.
    pub fn active_route(&self, shard: Shard, route: &str) -> String {
        format!("{}active:{route}", self.shard_base(shard))
    }

    /// Hash: one tenant's scheduler state and settings.
    pub fn tenant_state(&self, tenant: &TenantId) -> String {
        format!("{}t:{tenant}", self.shard_base(self.shard_of(tenant)))
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

    /// String: the theoretical arrival time (epoch µs, Redis time) of the
    /// tenant's submit-rate bucket (GCRA); it expires once the bucket is full.
    /// In the tenant's shard, beside the counts admission reads.
    pub fn tenant_rate(&self, tenant: &TenantId) -> String {
        format!("{}:rate", self.tenant_state(tenant))
    }

    /// Sorted set: room admitted requests reserved in the tenant's queue and
    /// have not filled yet, as `<ticket>:<tasks>` by the epoch ms the
    /// reservation lapses (a request that dies midway frees its room then).
    pub fn tenant_admitting(&self, tenant: &TenantId) -> String {
        format!("{}:admitting", self.tenant_state(tenant))
    }

    /// Stream: a tenant's lane of one priority and route; entries carry only
    /// a task id (`t`).
    pub fn lane(&self, tenant: &TenantId, route: &str, priority: Priority) -> String {
        format!("{}:lane:{}:{route}", self.tenant_state(tenant), priority.as_str())
    }

    /// Hash: a shard's queued entries per route.
    pub fn shard_routes(&self, shard: Shard) -> String {
        format!("{}routes", self.shard_base(shard))
    }

    /// Sorted set: the live workers' capabilities (`Capabilities::encode`,
    /// one member per distinct set) by the epoch ms the last worker
    /// advertising them stops counting as live.
    pub fn workers(&self) -> String {
        format!("{}:{{q}}:workers", self.prefix)
    }

    /// Sorted set: a shard's tasks waiting for a time (retries after
    /// backoff, and `not_before`), as `<lane>:<tenant>:<task id>`, by the
    /// epoch ms they become due.
    pub fn due(&self, shard: Shard) -> String {
        format!("{}due", self.shard_base(shard))
    }

    /// String with a TTL: `tenant` stored the screen with content hash
    /// `hash` (its `dedup` flag is per tenant).
    pub fn tenant_screen(&self, tenant: &TenantId, hash: &str) -> String {
        format!("{}:{{{tenant}}}:screen:{hash}", self.prefix)
    }

    /// Hash: counters of the shard's finished tasks by outcome, kept in the
    /// shard's slot so an acknowledgement and its count are one step; the
    /// fleet's counts are the sum over shards.
    pub fn outcomes(&self, shard: Shard) -> String {
        format!("{}outcomes", self.shard_base(shard))
    }

    /// The outcome counts of the shard `tenant` lives in.
    pub fn tenant_outcomes(&self, tenant: &TenantId) -> String {
        self.outcomes(self.shard_of(tenant))
    }

    /// Stream: tasks a worker ended on a single server, one entry per
    /// acknowledgement call, whose id is when they ended and whose field
    /// `t` lists their ids (space-separated); each is deleted once the
    /// retention has passed (a task ended elsewhere expires through its own
    /// TTL).
    pub fn ended(&self) -> String {
        format!("{}:{{q}}:ended", self.prefix)
    }

    /// Sorted set: the finished index of earlier versions (ended tasks by
    /// when they ended), still swept so an upgraded fleet deletes what it
    /// holds.
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

    /// Sorted set: a tenant's tasks whose record and events were moved to
    /// the object store after the hot window (`queue::archive`), each scored
    /// by `finished_at × 4 + outcome` (0 succeeded, 1 failed, 2 cancelled),
    /// so a listing or a batch's counts read the outcome and end time
    /// without reading the object; it leaves with its object after the
    /// retention.
    pub fn archived(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:archived", self.prefix)
    }

    /// String: the position of the last entry of `tenant`'s feed stream
    /// moved to the object store (`<ms>-<n>`); everything up to it is read
    /// from the archived segments, the rest from the stream.
    pub fn feed_archived(&self, tenant: &TenantId) -> String {
        format!("{}:events:feed:{{{tenant}}}:archived", self.prefix)
    }

    /// String with a TTL: held by the worker running an archive pass, so
    /// workers take turns rather than repeat each other's work (a pass is
    /// safe to run twice; this only saves the work).
    pub fn archiving(&self) -> String {
        format!("{}:{{q}}:archiving", self.prefix)
    }

    /// Sorted set: a tenant's dead-lettered task ids by the epoch ms they died.
    pub fn dead(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:dead", self.prefix)
    }

    /// Hash: what a tenant used on one UTC day (`YYYY-MM-DD`), one counter
    /// per field (see `usage`); expires 100 days after it was last written.
    pub fn usage_day(&self, tenant: &TenantId, day: &str) -> String {
        format!("{}:tenant:{{{tenant}}}:usage:{day}", self.prefix)
    }

    /// Hash: what a tenant used since its first count, the same counters as
    /// a day's; kept only while per-tenant metrics are on
    /// (`FLOTILLA_TENANT_METRICS`), and never expires (one per tenant).
    pub fn usage_total(&self, tenant: &TenantId) -> String {
        format!("{}:tenant:{{{tenant}}}:usage:total", self.prefix)
    }

    /// [`Keys::usage_day`] of `day` as the text before the tenant and after
    /// it, for a script that makes the key of each tenant it counts.
    pub fn usage_day_around(&self, day: &str) -> (String, String) {
        (format!("{}:tenant:{{", self.prefix), format!("}}:usage:{day}"))
    }

    /// The text after the tenant in [`Keys::usage_total`] (the text before
    /// it is [`Keys::usage_day_around`]'s).
    pub fn usage_total_after(&self) -> &'static str {
        "}:usage:total"
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

    /// Hash: where each task of an evaluation batch sits in its run plan
    /// (task id → `RunPlace` JSON), and under `plan` the plan itself.
    pub fn batch_runs(&self, id: &BatchId) -> String {
        format!("{}:batch:{{{id}}}:runs", self.prefix)
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

    /// String: the tenant that owns one of `provider`'s sandboxes (one
    /// started or kept alive for it); expires with the sandbox's deadline.
    pub fn sandbox_owner(&self, provider: &str, id: &str) -> String {
        format!("{}:sandbox:{provider}:owner:{id}", self.prefix)
    }

    /// String: the grant of one live-view token, under the SHA-256 of the
    /// token (hex); expires with the token.
    pub fn view_token(&self, digest: &str) -> String {
        format!("{}:view:token:{digest}", self.prefix)
    }

    /// String: the view token a one-time ticket stands for, under the
    /// SHA-256 of the ticket (hex); taken (and so deleted) by its one use.
    pub fn view_ticket(&self, digest: &str) -> String {
        format!("{}:view:ticket:{digest}", self.prefix)
    }

    /// String: the URL of the worker serving a task's live view.
    pub fn view_route(&self, id: &TaskId) -> String {
        format!("{}:view:route:{id}", self.prefix)
    }

    /// Integer: a task's control generation. A control token holds the
    /// value it was minted at and opens nothing once a release or a new
    /// takeover has moved it on.
    pub fn view_generation(&self, id: &TaskId) -> String {
        format!("{}:view:generation:{id}", self.prefix)
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

    /// String: on a cluster, the seq of the last event of one task the
    /// relay appended to its tenant's feed (kept for the retention).
    pub fn tenant_feed_marker(&self, tenant: &TenantId, task: &TaskId) -> String {
        format!("{}:events:feed:{{{tenant}}}:fed:{task}", self.prefix)
    }

    /// Hash: one webhook endpoint of a tenant (`url`, `events`, `batch`,
    /// `disabled`, `secret`, `old_secret`, `old_until`, `created_at`).
    pub fn webhook(&self, tenant: &TenantId, id: &str) -> String {
        format!("{}:tenant:{{{tenant}}}:webhook:{id}", self.prefix)
    }

    /// Stream: the signed deliveries of a relayed endpoint (`webhooks
    /// listen`), which the API passes on to its listener.
    pub fn webhook_relay(&self, tenant: &TenantId, id: &str) -> String {
        format!("{}:relay", self.webhook(tenant, id))
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

    /// The start of every key under `{w}` (the webhook messages and queues).
    pub fn webhook_base(&self) -> String {
        format!("{}:{{w}}:", self.prefix)
    }

    /// Hash: one webhook message to one endpoint and its delivery state.
    pub fn webhook_message(&self, msg: &str) -> String {
        format!("{}:{{w}}:msg:{msg}", self.prefix)
    }

    /// Sorted set: endpoint ids by the epoch ms one of their messages is
    /// next due, or, for an endpoint with every attempt slot taken, by when
    /// its oldest attempt must have ended.
    pub fn webhook_due(&self) -> String {
        format!("{}:{{w}}:due", self.prefix)
    }

    /// Sorted set: one endpoint's pending message ids by the epoch ms their
    /// next attempt is due (a message being sent is pushed a lease ahead).
    pub fn webhook_endpoint_due(&self, endpoint: &str) -> String {
        format!("{}:{{w}}:due:{endpoint}", self.prefix)
    }

    /// Sorted set: one endpoint's messages being attempted now, by the epoch
    /// ms the attempt must have ended (a deliverer killed midway leaves an
    /// entry that lapses then).
    pub fn webhook_in_flight(&self, endpoint: &str) -> String {
        format!("{}:{{w}}:inflight:{endpoint}", self.prefix)
    }

    /// Sorted set (all scores 0): an endpoint's message ids, which sort by
    /// time; the newest `FLOTILLA_WEBHOOK_LOG_MAX` only.
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

/// A field of a tenant's hash ([`Keys::tenant_state`]) that counts the
/// queued entries of one lane, `<lane index>:<route>`, as its priority and
/// route; `None` for the tenant's other fields.
pub fn lane_field(field: &str) -> Option<(Priority, &str)> {
    let (number, route) = field.split_at_checked(1)?;
    let route = route.strip_prefix(':')?;
    Some((Priority::from_lane_number(number)?, route))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_shards_lie_evenly_over_three_masters_and_a_single_server_keeps_f0() {
        assert_eq!(Keys::new("p").shard_base(Shard(0)), "p:{f0}:");
        assert_eq!(slot_of("f0"), 6_111); // as `CLUSTER KEYSLOT f0` answers
        let keys = Keys::new("p").with_shards(CLUSTER_SHARDS);
        let mut per_master = [0; 3];
        for shard in keys.shards() {
            let base = keys.shard_base(shard);
            let tag = base.split(['{', '}']).nth(1).unwrap_or_default();
            per_master[(slot_of(tag) * 3 / SLOTS) as usize] += 1;
        }
        per_master.sort_unstable();
        assert_eq!(per_master, [5, 5, 6]);
    }

    #[test]
    fn channels_follow_the_contract_under_the_default_prefix() {
        let keys = Keys::new("flotilla");
        let id = TaskId::parse("tsk_01jc0000000000000000000000").expect("id");
        assert_eq!(keys.task_channel(&id), "flotilla:events:task:tsk_01jc0000000000000000000000");
        let tenant = TenantId::parse("acme").expect("tenant");
        assert_eq!(keys.tenant_channel(&tenant), "flotilla:events:tenant:acme");
    }

    #[test]
    fn a_script_makes_the_same_usage_keys_from_their_parts() {
        let keys = Keys::new("flotilla");
        let tenant = TenantId::parse("acme").expect("tenant");
        let (before, after) = keys.usage_day_around("2026-11-28");
        assert_eq!(format!("{before}{tenant}{after}"), keys.usage_day(&tenant, "2026-11-28"));
        assert_eq!(format!("{before}{tenant}{}", keys.usage_total_after()), keys.usage_total(&tenant));
    }

    #[test]
    fn tenants_spread_over_the_shards() {
        let keys = Keys::new("p").with_shards(CLUSTER_SHARDS);
        let mut per_shard = [0_u32; CLUSTER_SHARDS as usize];
        for n in 0..1600 {
            per_shard[keys.shard_of(&TenantId::parse(&format!("tenant-{n}")).expect("tenant")).0 as usize] += 1;
        }
        assert!(per_shard.iter().all(|n| (50..=150).contains(n)), "{per_shard:?}");
        assert_eq!(Keys::new("p").shard_of(&TenantId::parse("acme").expect("tenant")), Shard(0));
    }

    #[test]
    fn lane_count_fields_are_told_from_the_tenants_other_fields() {
        assert_eq!(lane_field("2:scripted|none|"), Some((Priority::Normal, "scripted|none|")));
        assert_eq!(lane_field("1:default|any|eu"), Some((Priority::High, "default|any|eu")));
        for other in ["queued", "delayed:high", "vt", "9:x", "2x", ""] {
            assert_eq!(lane_field(other), None, "{other}");
        }
    }

    #[test]
    fn keys_used_together_share_a_slot() {
        let keys = Keys::new("p");
        let tag = |k: &str| k[k.find('{').expect("tag")..=k.find('}').expect("tag")].to_owned();
        let tenant = TenantId::parse("acme").expect("tenant");
        let keys = keys.with_shards(CLUSTER_SHARDS);
        let shard = keys.shard_of(&tenant);
        assert_eq!(tag(&keys.lane(&tenant, "scripted|none|", Priority::High)), tag(&keys.sched(shard)));
        assert_eq!(tag(&keys.tenant_state(&tenant)), tag(&keys.shard_routes(shard)));
        assert_eq!(tag(&keys.tenant_state(&tenant)), tag(&keys.due(shard)));
        assert_eq!(tag(&keys.active_route(shard, "scripted|none|")), tag(&keys.sched(shard)));
        let batch = BatchId::generate();
        assert_eq!(tag(&keys.batch(&batch)), tag(&keys.batch_tasks(&batch)));
        let schedule = ScheduleId::generate();
        assert_eq!(tag(&keys.schedule(&schedule)), tag(&keys.schedules_due()));
        assert_eq!(tag(&keys.schedule(&schedule)), tag(&keys.tenant_schedules(&tenant)));
    }
}
