//! Pages of the lists the API serves (tasks, dead letters, schedules,
//! webhooks, deliveries): every list is read `limit` items at a time and
//! says where the next page starts (`next_cursor`), so a tenant with
//! thousands of items never gets them in one answer.
//!
//! Invariant: walking a list page by page from no cursor until
//! `next_cursor` is absent yields every item present throughout the walk
//! exactly once, in the list's order; items added or removed meanwhile
//! never shift the others into a gap or a repeat, because a cursor names a
//! position in the order (a member, or a score and a member), not an offset.

use crate::error::QueueError;
use crate::redis_conn::Redis;

/// The most items one page of a list holds.
pub const MAX_PAGE: usize = 500;

/// A page of a list and where the next one starts.
#[derive(Debug, Clone)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// The same page with each item mapped.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page { items: self.items.into_iter().map(f).collect(), next_cursor: self.next_cursor }
    }
}

/// Which end of a list a page starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Oldest,
    Newest,
}

/// A page of the members of a sorted set whose scores are all 0 and whose
/// members sort by time: up to `limit` after `cursor` (a member), with the
/// last member as the next cursor when more follow.
pub async fn lex_page(
    redis: &Redis,
    key: &str,
    limit: usize,
    cursor: Option<&str>,
    order: Order,
) -> Result<Page<String>, QueueError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(key);
    match order {
        Order::Oldest => cmd.arg(cursor.map_or("-".to_owned(), |c| format!("({c}"))).arg("+").arg("BYLEX"),
        Order::Newest => cmd.arg(cursor.map_or("+".to_owned(), |c| format!("({c}"))).arg("-").arg("BYLEX").arg("REV"),
    };
    cmd.arg("LIMIT").arg(0).arg(limit + 1);
    let mut conn = redis.shared();
    let items: Vec<String> = cmd.query_async(&mut conn).await?;
    Ok(cut(items, limit, |last| last.clone()))
}

/// A position in a sorted set ordered by score, newest (highest) first:
/// the score and the member of the last item a page held. Written as
/// `<score>:<member>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScoreCursor {
    pub score: i64,
    pub member: String,
}

impl ScoreCursor {
    /// Reads a cursor written by [`ScoreCursor::to_string`]; `None` when it
    /// is not one.
    pub fn parse(text: &str) -> Option<Self> {
        let (score, member) = text.split_once(':')?;
        let score = score.parse().ok()?;
        (!member.is_empty()).then(|| ScoreCursor { score, member: member.to_owned() })
    }
}

impl std::fmt::Display for ScoreCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.score, self.member)
    }
}

/// How many members one read of [`score_page`] fetches beyond the page,
/// to step over members that share the cursor's score.
const TIES_PER_READ: usize = 64;

/// A page of the members of a sorted set whose scores are times, newest
/// first (ties by member, descending, as `ZRANGE … REV` orders them): up to
/// `limit` after `cursor`.
pub async fn score_page(
    redis: &Redis,
    key: &str,
    limit: usize,
    cursor: Option<&ScoreCursor>,
) -> Result<Page<String>, QueueError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let mut conn = redis.shared();
    let mut found: Vec<(String, i64)> = Vec::new();
    let mut offset = 0;
    loop {
        let count = limit + 1 + TIES_PER_READ;
        let max = cursor.map_or_else(|| "+inf".to_owned(), |c| c.score.to_string());
        let read: Vec<(String, f64)> = redis::cmd("ZRANGE")
            .arg(key)
            .arg(&max)
            .arg("-inf")
            .arg("BYSCORE")
            .arg("REV")
            .arg("LIMIT")
            .arg(offset)
            .arg(count)
            .arg("WITHSCORES")
            .query_async(&mut conn)
            .await?;
        let exhausted = read.len() < count;
        offset += read.len();
        // Members tied with the cursor's score come first; those at or above
        // the cursor's member were on earlier pages.
        found.extend(
            read.into_iter()
                .map(|(m, s)| (m, s as i64))
                .filter(|(m, s)| !cursor.is_some_and(|c| *s == c.score && *m >= c.member)),
        );
        if exhausted || found.len() > limit {
            break;
        }
    }
    Ok(cut(found, limit, |(member, score)| ScoreCursor { score: *score, member: member.clone() }.to_string()).map(|(m, _)| m))
}

/// Keeps the first `limit` of `items` (read one beyond), with a cursor at
/// the last kept when more follow.
fn cut<T>(mut items: Vec<T>, limit: usize, cursor_of: impl Fn(&T) -> String) -> Page<T> {
    let next_cursor = if items.len() > limit {
        items.truncate(limit);
        items.last().map(cursor_of)
    } else {
        None
    };
    Page { items, next_cursor }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_score_cursor_reads_back_what_it_wrote() {
        let cursor = ScoreCursor { score: 1_732_500_000_000, member: "tsk_01JD".to_owned() };
        assert_eq!(ScoreCursor::parse(&cursor.to_string()), Some(cursor));
        for bad in ["", "12", "x:tsk_1", "12:", ":tsk_1"] {
            assert_eq!(ScoreCursor::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_page_is_cut_one_past_its_limit() {
        let page = cut(vec![1, 2, 3], 2, ToString::to_string);
        assert_eq!((page.items, page.next_cursor.as_deref()), (vec![1, 2], Some("2")));
        let page = cut(vec![1, 2], 2, ToString::to_string);
        assert_eq!((page.items, page.next_cursor), (vec![1, 2], None));
    }
}
