//! How much of a conversation's screenshot history a client sends again.
//!
//! A provider's prompt cache reads a request's prefix only while it is the
//! same as an earlier request's, so a history that drops its oldest
//! screenshot every turn changes its prefix every turn and reads nothing
//! from the cache. [`ImageHistory`] keeps the newest `keep` screenshots and
//! drops older ones `chunk` at a time: the conversation holds between
//! `keep` and `keep + chunk - 1` of them, and its prefix changes once every
//! `chunk` turns instead of every turn (Anthropic's reference loop prunes
//! the same way). `after` holds every screenshot until there are more than
//! that many (the Claude toolset's server-side clearing starts so).

/// Keep the newest `keep` screenshots; drop older ones `chunk` at a time,
/// once there are more than `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageHistory {
    /// The fewest screenshots kept (at least 1: the newest).
    pub keep: usize,
    /// How many screenshots go at once (at least 1).
    pub chunk: usize,
    /// Nothing is dropped while there are this many or fewer.
    pub after: usize,
}

impl ImageHistory {
    /// Only the newest screenshot travels, older ones dropped every turn.
    pub const NEWEST_ONLY: Self = Self { keep: 1, chunk: 1, after: 0 };

    /// A history of `keep` and `chunk`, each raised to at least 1.
    pub fn new(keep: usize, chunk: usize) -> Self {
        Self { keep: keep.max(1), chunk: chunk.max(1), after: 0 }
    }

    /// How many of the oldest of `images` screenshots to drop now: none
    /// until at least `chunk` are past `keep`, then whole chunks.
    pub fn to_drop(&self, images: usize) -> usize {
        if images <= self.after {
            return 0;
        }
        let over = images.saturating_sub(self.keep.max(1));
        let chunk = self.chunk.max(1);
        over - over % chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_only_history_drops_every_older_screenshot() {
        assert_eq!(ImageHistory::NEWEST_ONLY.to_drop(1), 0);
        assert_eq!(ImageHistory::NEWEST_ONLY.to_drop(2), 1);
        assert_eq!(ImageHistory::NEWEST_ONLY.to_drop(7), 6);
    }

    #[test]
    fn a_chunked_history_drops_whole_chunks_so_the_prefix_changes_once_a_chunk() {
        let history = ImageHistory::new(3, 5);
        let mut kept = 0;
        let mut changes = 0;
        for _turn in 0..40 {
            kept += 1;
            let drop = history.to_drop(kept);
            if drop > 0 {
                changes += 1;
                assert_eq!(drop, 5);
            }
            kept -= drop;
            assert!((3..=7).contains(&kept) || kept < 3, "{kept}");
        }
        assert_eq!(changes, 7, "40 turns past 3 kept drop 5 at a time: 37 / 5 = 7 times");
    }
}
