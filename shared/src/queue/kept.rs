//! Kept-alive sandboxes against `max_sandboxes`: a sandbox a task left
//! running for later tasks (`sandbox.keep_alive`) holds one of its tenant's
//! sandbox slots until its deadline.
//!
//! The slot is the scheduler's own `sandboxed` count in the tenant's hash,
//! the count the claim holds against `maxsb` (see [`super::fair_scripts`]):
//! [`KEEP`] raises it when a sandbox is kept, and it comes down when the
//! sandbox's deadline passes (the promoter's pass, [`super::fair_scripts::PROMOTE`])
//! or when a later task of the tenant takes the sandbox by id
//! ([`TAKE_KEPT`]): that task's own entry holds a slot while it runs, and
//! the sandbox is kept again, with its new deadline, when the task leaves
//! it. The shard's `kept` sorted set holds `<tenant>:<provider>:<sandbox
//! id>` by the deadline (epoch ms).
//!
//! Invariant: a tenant's `sandboxed` is its entries running on sandbox
//! routes plus its members of `kept`, each kept sandbox counted once.

use std::sync::LazyLock;

use redis::Script;

use super::fair_scripts::fair_script;
use super::Queue;
use crate::error::QueueError;
use crate::ids::TenantId;

/// Keeps a sandbox for a tenant until a deadline, raising its `sandboxed`
/// count the first time. `KEYS[1]` the shard's `sched`; `ARGV[1]` the
/// shard base, `ARGV[2]` the tenant, `ARGV[3]` `<provider>:<sandbox id>`,
/// `ARGV[4]` the deadline (epoch ms). Returns 1 when newly kept.
static KEEP: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZADD', S .. 'kept', ARGV[4], tenant .. ':' .. ARGV[3]) == 0 then return 0 end
redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', 1)
activate(S, tenant)
flush(S)
return 1
"#,
    )
});

/// A task of the tenant takes its kept sandbox: the slot passes to the
/// task's entry. Same keys and arguments as [`KEEP`] but the deadline.
/// Returns 1 when the sandbox was kept.
static TAKE_KEPT: LazyLock<Script> = LazyLock::new(|| {
    fair_script(
        r#"
local S, tenant = ARGV[1], ARGV[2]
if redis.call('ZREM', S .. 'kept', tenant .. ':' .. ARGV[3]) == 0 then return 0 end
redis.call('HINCRBY', tkey(S, tenant), 'sandboxed', -1)
activate(S, tenant)
flush(S)
wake(S)
return 1
"#,
    )
});

impl Queue {
    /// Counts a kept-alive sandbox against its tenant's `max_sandboxes`
    /// until `until_ms` (its deadline, epoch ms); keeping it again moves
    /// the deadline.
    pub async fn keep_sandbox(&self, tenant: &TenantId, sandbox: &str, until_ms: i64) -> Result<(), QueueError> {
        self.kept_call(&KEEP, tenant, sandbox, Some(until_ms)).await
    }

    /// A task of `tenant` takes its kept sandbox: the sandbox stops
    /// counting as kept (the task's entry holds its slot while it runs).
    pub async fn take_kept_sandbox(&self, tenant: &TenantId, sandbox: &str) -> Result<(), QueueError> {
        self.kept_call(&TAKE_KEPT, tenant, sandbox, None).await
    }

    async fn kept_call(
        &self,
        script: &Script,
        tenant: &TenantId,
        sandbox: &str,
        until_ms: Option<i64>,
    ) -> Result<(), QueueError> {
        let mut inv = self.shard_call(script, self.keys.shard_of(tenant));
        inv.arg(tenant.as_str()).arg(sandbox);
        if let Some(until) = until_ms {
            inv.arg(until);
        }
        let mut conn = self.redis.shared();
        let _: i64 = inv.invoke_async(&mut conn).await?;
        Ok(())
    }
}
