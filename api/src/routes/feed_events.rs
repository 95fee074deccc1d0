//! `GET /v1/events`: every event of the caller's tenant as Server-Sent
//! Events, from now on, or resumed after `Last-Event-ID` for as long as the
//! retention keeps events. The ordering rules live in [`crate::feed`].

use axum::response::Response;
use flotilla_queue::queue::FeedId;

use super::sse::{self, Subscriber};
use crate::error::{ApiError, ErrorBody};
use crate::feed::TenantFeed;

/// Stream every event of the caller's tenant.
///
/// Each frame's `id` is its position in the tenant's feed (`<ms>-<n>`, or
/// `<ms>-<n>.<i>` for an event before the last of its entry; increasing). Without a position the stream starts with the next event;
/// with one it first sends every stored event after it (events are kept for
/// the retention window).
#[utoipa::path(get, path = "/v1/events", tag = "tasks", security(("bearer" = [])), params(sse::FeedResume),
    responses(sse::Answers, (status = 400, description = "Malformed `Last-Event-ID` or `after`", body = ErrorBody)))]
pub async fn stream(subscriber: Subscriber) -> Result<Response, ApiError> {
    let resume = subscriber.resume_at::<FeedId>(&sse::FEED)?;
    let Subscriber { state, tenant, .. } = &subscriber;
    sse::respond(state, tenant, format!("tenant {tenant}"), |client| async {
        let live = state.tails().follow(tenant).await?;
        let cursor = match resume {
            Some(cursor) => cursor,
            None => state.queue().reader().feed_tip(tenant).await?,
        };
        Ok(TenantFeed::new(state.queue().clone(), tenant.clone(), cursor, client).run(live))
    })
    .await
}
