//! A tenant feed's archived segments: the entries older than the hot
//! window, in objects named by their last position (zero-padded, so keys
//! sort as positions do), one `<position> <event JSON>` a line.
//!
//! Reading after a position lists the segments whose name sorts after it:
//! exactly those holding later entries. A pass killed after writing a
//! segment and before marking it writes a longer one next time; a reader
//! skips what it has passed already, so overlapping segments repeat
//! nothing.

use super::store_failed;
use crate::error::QueueError;
use crate::queue::{FeedEntry, FeedId, Queue};
use flotilla_types::ids::TenantId;

/// Segments listed per request while reading.
const LIST_AT_ONCE: i32 = 8;

/// The object name of a segment ending at `last`, under `prefix`.
fn segment_key(prefix: &str, last: FeedId) -> String {
    format!("{prefix}{:020}-{:020}.jsonl", last.ms, last.n)
}

/// The last position of the segment at `key`.
fn segment_end(key: &str) -> Option<FeedId> {
    let name = key.rsplit('/').next()?.strip_suffix(".jsonl")?;
    name.parse().ok()
}

/// The entry position before `at`'s entry when `at` names an event inside
/// it (the segment holding the rest of that entry must be listed), else `at`.
fn entry_before(at: FeedId) -> FeedId {
    match (at.is_inside_entry(), at.n, at.ms) {
        (false, _, _) => at,
        (true, 0, 0) => FeedId::START,
        (true, 0, ms) => FeedId::entry(ms - 1, u64::MAX),
        (true, n, ms) => FeedId::entry(ms, n - 1),
    }
}

fn segment_body(entries: &[FeedEntry]) -> String {
    entries.iter().map(|e| format!("{} {}\n", e.id, e.event)).collect()
}

fn segment_entries(body: &[u8]) -> Vec<FeedEntry> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|line| {
            let (id, event) = line.split_once(' ')?;
            Some(FeedEntry { id: id.parse().ok()?, event: event.to_owned() })
        })
        .collect()
}

impl Queue {
    /// Writes `entries` (in order) as one segment of `tenant`'s archived feed.
    pub(super) async fn write_feed_segment(&self, tenant: &TenantId, entries: &[FeedEntry]) -> Result<(), QueueError> {
        let (Some(archive), Some(last)) = (&self.archive, entries.last()) else { return Ok(()) };
        let key = segment_key(&archive.store.layout().archived_feed(tenant), last.id);
        archive.store.put_json(&key, segment_body(entries)).await.map_err(store_failed)?;
        Ok(())
    }

    /// The position up to which `tenant`'s feed was moved to the store
    /// ([`FeedId::START`] when nothing was).
    pub(in crate::queue) async fn feed_archived_mark(&self, tenant: &TenantId) -> Result<FeedId, QueueError> {
        if self.archive.is_none() {
            return Ok(FeedId::START);
        }
        let mut conn = self.redis.shared();
        let mark: Option<String> = redis::cmd("GET").arg(self.keys.feed_archived(tenant)).query_async(&mut conn).await?;
        Ok(mark.and_then(|m| m.parse().ok()).unwrap_or(FeedId::START))
    }

    /// Up to `room` archived entries of `tenant`'s feed after `after` and
    /// at most `mark`, in order.
    pub(in crate::queue) async fn archived_feed_after(
        &self,
        tenant: &TenantId,
        after: FeedId,
        mark: FeedId,
        room: usize,
    ) -> Result<Vec<FeedEntry>, QueueError> {
        let Some(archive) = &self.archive else { return Ok(Vec::new()) };
        let prefix = archive.store.layout().archived_feed(tenant);
        let mut found: Vec<FeedEntry> = Vec::new();
        let mut listed_after = segment_key(&prefix, entry_before(after));
        let mut last = after;
        while found.len() < room && last < mark {
            let segments = archive.store.list_after(&prefix, &listed_after, LIST_AT_ONCE).await.map_err(store_failed)?;
            let Some(final_segment) = segments.last() else { break };
            listed_after = final_segment.key.clone();
            for segment in &segments {
                if segment_end(&segment.key).is_none_or(|end| end <= last) {
                    continue;
                }
                let body = match archive.store.get(&segment.key).await {
                    Ok(body) => body,
                    // Deleted after the retention meanwhile.
                    Err(flotilla_blobstore::BlobError::NotFound { .. }) => continue,
                    Err(e) => return Err(store_failed(e)),
                };
                for entry in segment_entries(&body) {
                    if entry.id <= last || entry.id > mark || found.len() >= room {
                        continue;
                    }
                    last = entry.id;
                    found.push(entry);
                }
                if found.len() >= room {
                    break;
                }
            }
            if segments.len() < LIST_AT_ONCE as usize {
                break;
            }
        }
        Ok(found)
    }

    /// Deletes `tenant`'s feed segments that end before `floor`.
    pub(super) async fn expire_feed_segments(&self, tenant: &TenantId, floor: FeedId) -> Result<(), QueueError> {
        let Some(archive) = &self.archive else { return Ok(()) };
        let prefix = archive.store.layout().archived_feed(tenant);
        let segments = archive.store.list_after(&prefix, &prefix, 1_000).await.map_err(store_failed)?;
        for segment in segments {
            if segment_end(&segment.key).is_none_or(|end| end >= floor) {
                break;
            }
            archive.store.delete(&segment.key).await.map_err(store_failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reading_from_inside_an_entry_lists_the_segment_that_ends_with_that_entry() {
        let inside = FeedId { i: 2, ..FeedId::entry(1_000, 5) };
        let listed_after = segment_key("p/feed/", entry_before(inside));
        assert!(listed_after < segment_key("p/feed/", FeedId::entry(1_000, 5)), "the entry's own segment is listed");
        assert!(listed_after >= segment_key("p/feed/", FeedId::entry(1_000, 4)), "earlier segments are not");
        assert_eq!(entry_before(FeedId { i: 0, ..FeedId::entry(1_000, 0) }), FeedId::entry(999, u64::MAX));
        assert_eq!(entry_before(FeedId::entry(1_000, 5)), FeedId::entry(1_000, 5), "a whole entry lists after itself");
    }

    #[test]
    fn segment_names_sort_as_positions_and_read_back() {
        let a = segment_key("p/feed/", FeedId::entry(999, 12));
        let b = segment_key("p/feed/", FeedId::entry(1_000, 1));
        assert!(a < b);
        assert_eq!(segment_end(&a), Some(FeedId::entry(999, 12)));
        let entries = vec![
            FeedEntry { id: FeedId::entry(5, 0), event: r#"{"a":"x y"}"#.into() },
            FeedEntry { id: FeedId { i: 0, ..FeedId::entry(5, 1) }, event: "{}".into() },
            FeedEntry { id: FeedId::entry(5, 1), event: "{}".into() },
        ];
        assert_eq!(segment_entries(segment_body(&entries).as_bytes()), entries);
    }
}
