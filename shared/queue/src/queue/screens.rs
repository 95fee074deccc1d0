//! Which screens a tenant has stored: the `dedup` flag of `screenshot`
//! events, reported per tenant.
//!
//! Screenshots are stored once for the whole fleet, under their content
//! hash. Reporting that fleet-wide fact to a tenant would tell it whether any
//! other tenant ever saw an identical screen (an oracle on others' work), so
//! the flag a tenant sees is true only when that tenant itself stored the
//! same bytes before. Each (tenant, hash) is one key with a TTL, so the
//! record is bounded by time like the fleet-wide one.

use std::time::Duration;

use crate::error::QueueError;
use flotilla_blobstore::KNOWN_HASH_TTL;
use flotilla_types::ids::TenantId;

use super::Reader;

/// How long a tenant's stored screen is remembered.
pub const TENANT_SCREEN_TTL: Duration = KNOWN_HASH_TTL;

impl Reader<'_> {
    /// Records that `tenant` stored the screen with content hash `hash`;
    /// returns whether it had stored it before.
    pub async fn tenant_stored_before(self, tenant: &TenantId, hash: &str) -> Result<bool, QueueError> {
        let mut conn = self.redis.shared();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.keys.tenant_screen(tenant, hash))
            .arg(1)
            .arg("NX")
            .arg("EX")
            .arg(TENANT_SCREEN_TTL.as_secs())
            .query_async(&mut conn)
            .await?;
        Ok(set.is_none())
    }
}
