//! A tenant's feed: every event of its tasks, in the order they happened,
//! resumable from any position within the retention window.
//!
//! On a single server the task scripts append each event to the tenant's
//! feed stream in the same step that stores and publishes it, so the
//! stream holds exactly the events the task hashes hold, in commit order.
//! A position is the stream entry id ([`FeedId`]), which the API hands out
//! as the SSE `id` of `GET /v1/events` and of a batch's stream. The stream
//! is trimmed to the retention window by housekeeping, never on the hot
//! path. On a cluster the stream lives in another slot than the task, so
//! the scripts cannot append to it: the API relays each event it hears to
//! the feed instead ([`super::feed_relay`]), once, in each task's order.

use std::fmt;
use std::str::FromStr;

use redis::streams::StreamRangeReply;

use super::Queue;
use crate::clock;
use crate::error::QueueError;
use crate::ids::TenantId;

/// How many entries one read of a feed takes at most.
pub const FEED_READ: usize = 500;

/// A position in a tenant's feed: a stream entry id, `<ms>-<n>`. Ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FeedId {
    pub ms: u64,
    pub n: u64,
}

impl FeedId {
    /// The position before every entry.
    pub const START: FeedId = FeedId { ms: 0, n: 0 };

    /// The first position at or after `ms`.
    pub fn at_ms(ms: u64) -> Self {
        Self { ms, n: 0 }
    }
}

impl fmt::Display for FeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.n)
    }
}

/// Text that is not a feed position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a feed position (<ms>-<n>)")]
pub struct BadFeedId;

impl FromStr for FeedId {
    type Err = BadFeedId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (ms, n) = text.trim().split_once('-').ok_or(BadFeedId)?;
        Ok(Self { ms: ms.parse().map_err(|_| BadFeedId)?, n: n.parse().map_err(|_| BadFeedId)? })
    }
}

/// One event of a feed at its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEntry {
    pub id: FeedId,
    /// The event JSON, exactly as stored in its task.
    pub event: String,
}

impl Queue {
    /// Whether the task scripts append each event to its tenant's feed
    /// themselves (a single server); on a cluster the API's relay does
    /// (see [`super::feed_relay`]).
    pub fn scripts_append_feeds(&self) -> bool {
        !self.redis.is_cluster()
    }

    /// The first argument of the task scripts (see `Keys::script_channels`).
    pub(super) fn script_channels(&self) -> String {
        self.keys.script_channels(self.scripts_append_feeds())
    }

    /// Up to [`FEED_READ`] events of `tenant`'s feed after `after`, in
    /// order: first those moved to the archive (up to its mark), then the
    /// stream's.
    pub async fn feed_after(&self, tenant: &TenantId, after: FeedId) -> Result<Vec<FeedEntry>, QueueError> {
        let mark = self.feed_archived_mark(tenant).await?;
        let mut found = if after < mark { self.archived_feed_after(tenant, after, mark, FEED_READ).await? } else { Vec::new() };
        if found.len() >= FEED_READ {
            return Ok(found);
        }
        // The archive held everything up to its mark: the stream holds the rest.
        found.extend(self.stream_after(tenant, after.max(mark), FEED_READ - found.len()).await?);
        Ok(found)
    }

    /// Up to `count` entries of `tenant`'s feed stream after `after`.
    async fn stream_after(&self, tenant: &TenantId, after: FeedId, count: usize) -> Result<Vec<FeedEntry>, QueueError> {
        let mut conn = self.redis.shared();
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(self.keys.tenant_feed(tenant))
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        Ok(reply
            .ids
            .into_iter()
            .filter_map(|entry| {
                let id = entry.id.parse().ok()?;
                let event: String = entry.get("e")?;
                Some(FeedEntry { id, event })
            })
            .collect())
    }

    /// The position of the last event of `tenant`'s feed, archived or not
    /// ([`FeedId::START`] when it is empty).
    pub async fn feed_tip(&self, tenant: &TenantId) -> Result<FeedId, QueueError> {
        let mut conn = self.redis.shared();
        let reply: StreamRangeReply = redis::cmd("XREVRANGE")
            .arg(self.keys.tenant_feed(tenant))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut conn)
            .await?;
        let tip = reply.ids.first().and_then(|e| e.id.parse().ok()).unwrap_or(FeedId::START);
        Ok(tip.max(self.feed_archived_mark(tenant).await?))
    }

    /// Drops the events older than the retention from every tenant's feed,
    /// whole listpack nodes at a time (`MINID ~`). Returns how many went.
    pub async fn trim_feeds(&self) -> Result<u64, QueueError> {
        let mut conn = self.redis.shared();
        let tenants: Vec<String> = redis::cmd("SMEMBERS").arg(self.keys.tenants()).query_async(&mut conn).await?;
        let floor = FeedId::at_ms((clock::now_ms().max(0) as u64).saturating_sub(self.retention_ms()));
        let cmds = tenants
            .iter()
            .filter_map(|t| TenantId::parse(t).ok())
            .map(|t| {
                let mut cmd = redis::cmd("XTRIM");
                cmd.arg(self.keys.tenant_feed(&t)).arg("MINID").arg("~").arg(floor.to_string());
                cmd
            })
            .collect();
        let trimmed: Vec<u64> = self.redis.query_many(cmds).await?;
        Ok(trimmed.into_iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_parse_print_and_order() {
        let a: FeedId = "1700000000000-3".parse().expect("parses");
        assert_eq!(a, FeedId { ms: 1_700_000_000_000, n: 3 });
        assert_eq!(a.to_string(), "1700000000000-3");
        assert!(a < "1700000000000-4".parse().expect("parses"));
        assert!(a < "1700000000001-0".parse().expect("parses"));
        assert!("12".parse::<FeedId>().is_err());
        assert!("a-1".parse::<FeedId>().is_err());
        assert!("-1-2".parse::<FeedId>().is_err());
    }
}
