//! `GET /v1/events`: every event of the caller's tenant as Server-Sent
//! Events, from now on, or resumed after `Last-Event-ID` for as long as the
//! retention keeps events. The ordering rules live in [`crate::feed`].

use axum::response::Response;
use flotilla_shared::queue::FeedId;
use serde::Deserialize;
use utoipa::IntoParams;

use super::sse::{self, Subscriber};
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::feed::TenantFeed;

/// What a feed position looks like, for errors.
pub const POSITION: &str = "the id of a frame of this feed, like 1732500000000-0";

/// Parameters of a feed.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct FeedParams {
    /// Send only events after this position; `Last-Event-ID` wins when both are given.
    #[param(pattern = r"^([0-9]{1,19}-[0-9]{1,19})?$")]
    pub after: Option<String>,
}

/// Stream every event of the caller's tenant.
#[utoipa::path(
    get,
    path = "/v1/events",
    tag = "tasks",
    params(
        ("Last-Event-ID" = Option<String>, Header, nullable = false, pattern = r"^([0-9]{1,19}-[0-9]{1,19})?$", description = "Resume after this position (the `id` of the last frame received)"),
        FeedParams,
    ),
    responses(
        (status = 200, description = "Server-Sent Events: `id` the position in the tenant's feed (`<ms>-<n>`, increasing), `event` the type, `data` one Event as JSON. Without a position the stream starts with the next event; with one it first sends every stored event after it (events are kept for the retention window). The stream ends after its maximum lifetime (`FLOTILLA_STREAM_MAX_LIFETIME_S`); the client resumes with `Last-Event-ID`", body = sse::SseFrame, content_type = "text/event-stream"),
        (status = 400, description = "Malformed `Last-Event-ID` or `after`", body = ErrorBody),
        sse::Refusals,
    ),
    security(("bearer" = []))
)]
pub async fn stream(subscriber: Subscriber, QueryParams(params): QueryParams<FeedParams>) -> Result<Response, ApiError> {
    let resume = subscriber.resume_at::<FeedId>(params.after.as_deref(), POSITION)?;
    let Subscriber { state, tenant, .. } = &subscriber;
    sse::respond(state, tenant, format!("tenant {tenant}"), |client| async {
        let live = state.tails().follow(tenant).await?;
        let cursor = match resume {
            Some(cursor) => cursor,
            None => state.queue().feed_tip(tenant).await?,
        };
        Ok(TenantFeed::new(state.queue().clone(), tenant.clone(), cursor, client).run(live))
    })
    .await
}
