//! `GET /v1/webhooks/listen`: the caller's webhook deliveries relayed to it
//! over Server-Sent Events while it listens (what `flotilla webhooks
//! listen` follows), with no inbound port on its side. The stream makes a
//! relayed endpoint of the caller's tenant for the events asked, opens with
//! its id and secret, carries each delivery signed as it would be posted,
//! and deletes the endpoint when it ends.

use axum::extract::State;
use axum::response::Response;
use flotilla_queue::webhooks::EventType;
use flotilla_types::{BatchId, ValidationError};
use serde::Deserialize;
use utoipa::IntoParams;

use super::sse;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::extract::QueryParams;
use crate::feed::RelayFeed;
use crate::state::AppState;

/// Every event type, what a listener gets unless it names some.
const EVERY_EVENT: [EventType; 5] = [
    EventType::TaskSucceeded,
    EventType::TaskFailed,
    EventType::TaskCancelled,
    EventType::TaskWaiting,
    EventType::BatchCompleted,
];

/// What a listener asks for.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListenParams {
    /// Event types, comma-separated (`task.succeeded,task.failed`); every type when absent.
    #[param(
        pattern = r"^(task\.succeeded|task\.failed|task\.cancelled|task\.waiting|batch\.completed)(,(task\.succeeded|task\.failed|task\.cancelled|task\.waiting|batch\.completed))*$"
    )]
    pub events: Option<String>,
    /// Only events of this batch's tasks (and its completion).
    #[param(value_type = Option<String>, pattern = r"^bat_[0-7][0-9a-hjkmnp-tv-z]{25}$")]
    pub batch_id: Option<String>,
}

impl ListenParams {
    fn events(&self) -> Result<Vec<EventType>, ValidationError> {
        let Some(list) = &self.events else { return Ok(EVERY_EVENT.to_vec()) };
        list.split(',')
            .map(|name| {
                EVERY_EVENT
                    .into_iter()
                    .find(|event| event.as_str() == name)
                    .ok_or_else(|| ValidationError::at("events", format!("{name:?} is no event type")))
            })
            .collect()
    }

    fn batch(&self) -> Result<Option<BatchId>, ValidationError> {
        self.batch_id.as_deref().map(|b| BatchId::parse(b).map_err(|e| e.under("batch_id"))).transpose()
    }
}

/// Receive the tenant's webhook deliveries over this stream.
///
/// Opens with a `ready` frame (`{"id", "secret"}`: the relayed endpoint and
/// the secret its deliveries are signed with), then sends a `delivery` frame
/// per delivery: `{"webhook-id", "webhook-timestamp", "webhook-signature",
/// "body"}`, exactly as a receiver of a posted delivery gets them. The
/// endpoint is deleted when the stream ends (the listener goes, or the
/// stream's lifetime ends).
#[utoipa::path(get, path = "/v1/webhooks/listen", tag = "webhooks", security(("bearer" = [])), params(ListenParams),
    responses(sse::Answers, (status = 400, description = "Unknown event type or malformed `batch_id`", body = ErrorBody),
        (status = 404, description = "`batch_id` names no batch of this tenant", body = ErrorBody)))]
pub async fn listen(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    QueryParams(params): QueryParams<ListenParams>,
) -> Result<Response, ApiError> {
    let events = params.events()?;
    let batch = params.batch()?;
    if let Some(batch) = &batch {
        state.queue().reader().batch(&tenant, batch).await?.ok_or(ApiError::NotFound("no such batch"))?;
    }
    let hooks = state.webhooks().clone();
    sse::respond(&state, &tenant, format!("webhook relay of {tenant}"), |client| async {
        let (endpoint, secret) = hooks.create_relay(&tenant, events, batch).await?;
        Ok(RelayFeed::new(hooks.clone(), tenant.clone(), endpoint.id, secret, client).run())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_default_to_every_type_and_unknown_ones_are_refused() {
        let params = |events: Option<&str>| ListenParams { events: events.map(str::to_owned), batch_id: None };
        assert_eq!(params(None).events().expect("all"), EVERY_EVENT.to_vec());
        assert_eq!(params(Some("task.failed")).events().expect("one"), [EventType::TaskFailed]);
        let err = params(Some("task.failed,task.lost")).events().expect_err("unknown");
        assert_eq!(err.field.as_deref(), Some("events"));
    }
}
