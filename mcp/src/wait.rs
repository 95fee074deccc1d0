//! `wait_for_task`: follows the task's event stream (reconnecting as the
//! command line does) until its terminal event, the time asked for, or the
//! client's cancel, sending one progress notification per event — the
//! event's `seq` as progress, the event's JSON as message — when the client
//! asked for progress; then answers the task's record as the API gives it.

use std::time::Duration;

use flotilla_client::feed::{EventFeed, Reconnect};
use flotilla_client::{Client, ClientError};
use rmcp::model::{CallToolResult, ProgressNotificationParam, ProgressToken};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use crate::answer::{tool_error, tool_result};

/// How long a wait lasts when the caller does not say.
const DEFAULT_WAIT: Duration = Duration::from_secs(300);
/// The longest wait one call may ask for.
const MAX_WAIT_S: u64 = 3600;

/// Waits for task `id` for up to `timeout_s` seconds.
pub async fn wait_for_task(
    client: &Client,
    id: &str,
    timeout_s: Option<u64>,
    context: &RequestContext<RoleServer>,
) -> CallToolResult {
    let limit = timeout_s.map_or(DEFAULT_WAIT, |seconds| Duration::from_secs(seconds.min(MAX_WAIT_S)));
    let token = context.meta.get_progress_token();
    let followed = tokio::select! {
        followed = tokio::time::timeout(limit, follow(client, id, token, context)) => followed.unwrap_or(Ok(())),
        () = context.ct.cancelled() => Ok(()),
    };
    if let Err(err) = followed {
        return tool_error(&err);
    }
    tool_result(client.get(&["v1", "tasks", id], &[]).await)
}

/// Reads the task's events to its terminal one, reporting each.
async fn follow(
    client: &Client,
    id: &str,
    token: Option<ProgressToken>,
    context: &RequestContext<RoleServer>,
) -> Result<(), ClientError> {
    let mut feed = EventFeed::new(client, id, Reconnect::default());
    while let Some(event) = feed.next().await? {
        let Some(token) = &token else { continue };
        let seq = event.value.get("seq").and_then(serde_json::Value::as_u64).unwrap_or(0);
        // Progress must increase, and seq does; u64 → f64 is exact up to 2^53 events.
        let progress = ProgressNotificationParam::new(token.clone(), seq as f64).with_message(event.raw);
        if let Err(err) = context.peer.notify_progress(progress).await {
            tracing::debug!(error = %err, "a progress notification was not delivered");
        }
    }
    Ok(())
}
