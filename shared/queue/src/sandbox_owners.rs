//! Who a sandbox belongs to. A sandbox started for a task, or kept alive
//! after it, is recorded in Redis with the tenant it was started for, until
//! its deadline. A task that names a sandbox by id (`sandbox.id`) gets it
//! only when its tenant is that owner: another tenant's sandbox, running or
//! kept alive, answers exactly as an id no provider knows, so a tenant can
//! neither reach nor learn of another tenant's desktops. A sandbox with no
//! record (a warm one in a pool, one started outside the fleet) belongs to
//! no tenant and is never attached to.

use flotilla_types::ids::TenantId;
use time::OffsetDateTime;

use crate::error::QueueError;
use crate::keys::Keys;
use crate::redis_conn::Redis;

/// The owner records of one fleet's sandboxes.
#[derive(Clone)]
pub struct SandboxOwners {
    redis: Redis,
    keys: Keys,
}

impl SandboxOwners {
    pub(crate) fn new(redis: Redis, keys: Keys) -> Self {
        Self { redis, keys }
    }

    /// Records `tenant` as the owner of `provider`'s sandbox `id` until
    /// `until` (its deadline), replacing any earlier record.
    pub async fn record(&self, provider: &str, id: &str, tenant: &TenantId, until: OffsetDateTime) -> Result<(), QueueError> {
        let at_ms = i64::try_from(until.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX).max(1);
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.keys.sandbox_owner(provider, id)).arg(tenant.as_str()).arg("PXAT").arg(at_ms);
        cmd.query_async::<()>(&mut self.redis.shared()).await?;
        Ok(())
    }

    /// Whether `tenant` owns `provider`'s sandbox `id` now.
    pub async fn owned_by(&self, provider: &str, id: &str, tenant: &TenantId) -> Result<bool, QueueError> {
        let mut cmd = redis::cmd("GET");
        cmd.arg(self.keys.sandbox_owner(provider, id));
        let owner: Option<String> = cmd.query_async(&mut self.redis.shared()).await?;
        Ok(owner.as_deref() == Some(tenant.as_str()))
    }

    /// Drops the record of a sandbox that has ended.
    pub async fn forget(&self, provider: &str, id: &str) -> Result<(), QueueError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(self.keys.sandbox_owner(provider, id));
        cmd.query_async::<()>(&mut self.redis.shared()).await?;
        Ok(())
    }
}
