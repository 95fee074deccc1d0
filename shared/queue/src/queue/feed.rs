//! A tenant's feed: every event of its tasks, in the order they happened,
//! resumable from any position within the retention window.
//!
//! On a single server the task scripts append the events to the tenant's
//! feed stream in the same script call that stores and publishes them, so
//! the stream holds exactly the events the task hashes hold, in commit
//! order. A call that writes many events (a claim, an acknowledgement, a
//! batch's creation) appends each tenant's as one entry (up to 1 000
//! events), one event a field: `e`, `e1`, `e2`, … (joining them into one
//! string cost Redis more than the fields do); an entry of one event is
//! just `e`. A field may also hold several events one a line (an event's
//! JSON holds no raw newline), as entries written before did. A position ([`FeedId`]) is the entry id and the event's
//! place in it, which the API hands out as the SSE `id` of `GET /v1/events`
//! and of a batch's stream. The stream
//! is trimmed to the retention window by housekeeping, never on the hot
//! path. On a cluster the stream lives in another slot than the task, so
//! the scripts cannot append to it: the API relays each event it hears to
//! the feed instead ([`super::feed_relay`]), once, in each task's order.

use std::fmt;
use std::str::FromStr;

use redis::streams::{StreamId, StreamRangeReply};

use super::Queue;
use super::{Housekeeper, Reader};
use crate::error::QueueError;
use flotilla_types::clock;
use flotilla_types::ids::TenantId;

/// How many entries one read of a feed takes at most.
pub const FEED_READ: usize = 500;

/// A position in a tenant's feed: the stream entry id `<ms>-<n>` and the
/// event's place in that entry. The last (or only) event of an entry is
/// named by the entry id alone, `<ms>-<n>`; an earlier one `<ms>-<n>.<i>`
/// (`i` from 0). Ordered as the events are, so resuming after a position
/// repeats nothing and skips nothing, also inside an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FeedId {
    pub ms: u64,
    pub n: u64,
    /// The event's index in the entry, [`FeedId::LAST`] for its last.
    pub i: u32,
}

impl Default for FeedId {
    fn default() -> Self {
        Self::START
    }
}

impl FeedId {
    /// `i` of an entry's last event: the entry id alone names it.
    pub const LAST: u32 = u32::MAX;

    /// The position before every entry.
    pub const START: FeedId = FeedId::entry(0, 0);

    /// The position of entry `<ms>-<n>` as a whole (its last event).
    pub const fn entry(ms: u64, n: u64) -> Self {
        Self { ms, n, i: Self::LAST }
    }

    /// The first position at or after `ms`.
    pub fn at_ms(ms: u64) -> Self {
        Self::entry(ms, 0)
    }

    /// Whether this names an event before the last of its entry.
    pub fn is_inside_entry(&self) -> bool {
        self.i != Self::LAST
    }

    /// The stream entry id, `<ms>-<n>`.
    pub fn entry_id(&self) -> String {
        format!("{}-{}", self.ms, self.n)
    }
}

impl fmt::Display for FeedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_inside_entry() {
            write!(f, "{}-{}.{}", self.ms, self.n, self.i)
        } else {
            write!(f, "{}-{}", self.ms, self.n)
        }
    }
}

/// Text that is not a feed position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a feed position (<ms>-<n>, or <ms>-<n>.<i>)")]
pub struct BadFeedId;

impl FromStr for FeedId {
    type Err = BadFeedId;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let digits = |part: &str| -> Result<u64, BadFeedId> {
            if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(BadFeedId);
            }
            part.parse().map_err(|_| BadFeedId)
        };
        let (id, i) = match text.trim().split_once('.') {
            // An entry never holds a billion events: at most nine digits.
            Some((id, i)) if i.len() <= 9 => (id, u32::try_from(digits(i)?).map_err(|_| BadFeedId)?),
            Some(_) => return Err(BadFeedId),
            None => (text.trim(), Self::LAST),
        };
        let (ms, n) = id.split_once('-').ok_or(BadFeedId)?;
        Ok(Self { ms: digits(ms)?, n: digits(n)?, i })
    }
}

/// One event of a feed at its position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeedEntry {
    pub id: FeedId,
    /// The event JSON, exactly as stored in its task.
    pub event: String,
}

impl FeedEntry {
    /// The events of stream entry `entry` whose fields hold `texts`, owned.
    pub fn all_of(entry: FeedId, texts: &[&str]) -> Vec<FeedEntry> {
        events_in(entry, texts).map(|(id, event)| FeedEntry { id, event: event.to_owned() }).collect()
    }
}

/// The texts of a feed stream entry, in order: its `e` field, then `e1`,
/// `e2`, … while there are more (nothing without an `e`).
pub fn texts_of(entry: &StreamId) -> Vec<&str> {
    let text = |name: &str| match entry.map.get(name) {
        Some(redis::Value::BulkString(bytes)) => std::str::from_utf8(bytes).ok(),
        Some(redis::Value::SimpleString(text)) => Some(text.as_str()),
        _ => None,
    };
    let Some(first) = text("e") else { return Vec::new() };
    let mut texts = vec![first];
    while let Some(next) = text(&format!("e{}", texts.len())) {
        texts.push(next);
    }
    texts
}

/// The events of stream entry `entry` whose fields hold `texts` (each one
/// event or several one a line), each with its position.
pub fn events_in<'t>(entry: FeedId, texts: &[&'t str]) -> impl Iterator<Item = (FeedId, &'t str)> {
    let events: Vec<&'t str> = texts.iter().flat_map(|text| text.split('\n')).collect();
    let last = events.len().saturating_sub(1);
    events.into_iter().enumerate().map(move |(i, event)| {
        let id = if i == last { FeedId::entry(entry.ms, entry.n) } else { FeedId { i: i as u32, ..entry } };
        (id, event)
    })
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

    /// The events of up to `count` entries of `tenant`'s feed stream after
    /// `after` (from inside `after`'s entry when it names an earlier event).
    async fn stream_after(&self, tenant: &TenantId, after: FeedId, count: usize) -> Result<Vec<FeedEntry>, QueueError> {
        let mut conn = self.redis.shared();
        let from = if after.is_inside_entry() { after.entry_id() } else { format!("({after}") };
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(self.keys.tenant_feed(tenant))
            .arg(from)
            .arg("+")
            .arg("COUNT")
            .arg(count)
            .query_async(&mut conn)
            .await?;
        Ok(events_of(reply).filter(|e| e.id > after).collect())
    }
}

impl Reader<'_> {
    /// Up to [`FEED_READ`] events of `tenant`'s feed after `after`, in
    /// order: first those moved to the archive (up to its mark), then the
    /// stream's.
    pub async fn feed_after(self, tenant: &TenantId, after: FeedId) -> Result<Vec<FeedEntry>, QueueError> {
        let mark = self.feed_archived_mark(tenant).await?;
        let mut found = if after < mark { self.archived_feed_after(tenant, after, mark, FEED_READ).await? } else { Vec::new() };
        if found.len() >= FEED_READ {
            return Ok(found);
        }
        // The archive held everything up to its mark: the stream holds the rest.
        found.extend(self.stream_after(tenant, after.max(mark), FEED_READ - found.len()).await?);
        Ok(found)
    }

    /// The position of the last event of `tenant`'s feed, archived or not
    /// ([`FeedId::START`] when it is empty).
    pub async fn feed_tip(self, tenant: &TenantId) -> Result<FeedId, QueueError> {
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
}

impl Housekeeper<'_> {
    /// Drops the events older than the retention from every tenant's feed,
    /// whole listpack nodes at a time (`MINID ~`). Returns how many went.
    pub async fn trim_feeds(self) -> Result<u64, QueueError> {
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

/// The events of feed stream entries, in order, each at its position.
pub fn events_of(reply: StreamRangeReply) -> impl Iterator<Item = FeedEntry> {
    reply.ids.into_iter().flat_map(|entry| match entry.id.parse::<FeedId>().ok().filter(|id| !id.is_inside_entry()) {
        Some(id) => FeedEntry::all_of(id, &texts_of(&entry)),
        None => Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> FeedId {
        text.parse().expect("a position")
    }

    #[test]
    fn positions_parse_print_and_order() {
        let a = at("1700000000000-3");
        assert_eq!(a, FeedId::entry(1_700_000_000_000, 3));
        assert_eq!(a.to_string(), "1700000000000-3");
        assert!(a < at("1700000000000-4"));
        assert!(a < at("1700000000001-0"));
        for bad in ["12", "a-1", "-1-2", "1-2.", "1-2.x", "1-2.-1", "1-2.4294967295", "1-2.1234567890", "1.2-3", "+1-2"] {
            assert!(bad.parse::<FeedId>().is_err(), "{bad} is not a position");
        }
    }

    #[test]
    fn an_event_inside_an_entry_comes_before_the_entry_s_last_and_after_the_entry_before() {
        let inside = at("1700000000000-3.1");
        assert_eq!(inside, FeedId { ms: 1_700_000_000_000, n: 3, i: 1 });
        assert_eq!(inside.to_string(), "1700000000000-3.1");
        assert!(at("1700000000000-2") < at("1700000000000-3.0"));
        assert!(at("1700000000000-3.0") < inside);
        assert!(inside < at("1700000000000-3"));
        assert_eq!(inside.entry_id(), "1700000000000-3");
    }

    #[test]
    fn an_entry_of_several_events_gives_each_its_own_position_and_the_last_the_entry_id() {
        for texts in [
            &["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"][..],
            &["{\"a\":1}\n{\"b\":2}\n{\"c\":3}"],
            &["{\"a\":1}\n{\"b\":2}", "{\"c\":3}"],
        ] {
            let events = FeedEntry::all_of(at("5-1"), texts);
            let positions: Vec<String> = events.iter().map(|e| e.id.to_string()).collect();
            assert_eq!(positions, ["5-1.0", "5-1.1", "5-1"], "{texts:?}");
            assert_eq!(events[1].event, "{\"b\":2}");
        }
        let one = FeedEntry::all_of(at("5-2"), &["{}"]);
        assert_eq!(one, [FeedEntry { id: at("5-2"), event: "{}".into() }]);
    }

    fn stream_entry(fields: &[(&str, &str)]) -> StreamId {
        let map = fields.iter().map(|(k, v)| ((*k).to_owned(), redis::Value::BulkString(v.as_bytes().to_vec()))).collect();
        StreamId { id: "5-1".into(), map, ..StreamId::default() }
    }

    #[test]
    fn an_entry_s_texts_are_its_e_fields_in_order_and_nothing_without_e() {
        let entry = stream_entry(&[("e2", "{\"c\":3}"), ("e", "{\"a\":1}"), ("e1", "{\"b\":2}"), ("e4", "{}")]);
        assert_eq!(texts_of(&entry), ["{\"a\":1}", "{\"b\":2}", "{\"c\":3}"], "e, e1, e2: e4 comes after a gap and is no part");
        assert!(texts_of(&stream_entry(&[("e1", "{}")])).is_empty());
    }
}
