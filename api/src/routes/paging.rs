//! `limit` and `cursor`: the query parameters every list endpoint takes
//! (`GET /v1/dead`, `/v1/schedules`, `/v1/webhooks`, a webhook's
//! deliveries; `GET /v1/tasks` adds its filters to the same two). Each list
//! answers `next_cursor`, absent (null) on its last page. A route lists
//! `PageParams` and then its own `cursor` (typed, so the document states
//! the form the server accepts).

use flotilla_queue::page::MAX_PAGE;
use flotilla_types::ValidationError;
use serde::Deserialize;
use utoipa::IntoParams;

use crate::extract::parse_limit;

/// Items on a page when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 50;

/// `limit` and `cursor` of a list.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PageParams {
    /// Items per page, 1 to 500 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 500)]
    pub limit: Option<String>,
    /// The `next_cursor` of the previous page, as given. Each route
    /// documents it with its own type, since each list's cursor has its own
    /// form.
    #[param(ignore)]
    pub cursor: Option<String>,
}

impl PageParams {
    /// The page size asked for, checked.
    pub fn limit(&self) -> Result<usize, ValidationError> {
        parse_limit(self.limit.as_deref(), DEFAULT_LIMIT, MAX_PAGE)
    }

    /// The cursor, read by `parse` (an earlier page's `next_cursor`), or
    /// `None` on the first page.
    pub fn cursor<T>(&self, parse: impl Fn(&str) -> Option<T>) -> Result<Option<T>, ValidationError> {
        match self.cursor.as_deref().filter(|c| !c.is_empty()) {
            None => Ok(None),
            Some(c) => parse(c)
                .map(Some)
                .ok_or_else(|| ValidationError::at("cursor", "cursor must be the next_cursor of an earlier page")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(limit: Option<&str>, cursor: Option<&str>) -> PageParams {
        PageParams { limit: limit.map(str::to_owned), cursor: cursor.map(str::to_owned) }
    }

    #[test]
    fn limits_and_cursors_are_checked() {
        assert_eq!(params(None, None).limit(), Ok(DEFAULT_LIMIT));
        assert_eq!(params(Some("500"), None).limit(), Ok(500));
        for bad in ["0", "501", "-1", "x", ""] {
            assert_eq!(params(Some(bad), None).limit().expect_err(bad).field.as_deref(), Some("limit"));
        }
        let number = |c: &str| c.parse::<u32>().ok();
        assert_eq!(params(None, Some("")).cursor(number), Ok(None));
        assert_eq!(params(None, Some("7")).cursor(number), Ok(Some(7)));
        assert_eq!(params(None, Some("seven")).cursor(number).expect_err("refused").field.as_deref(), Some("cursor"));
    }
}
