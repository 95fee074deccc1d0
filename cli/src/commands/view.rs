//! Watching a task's desktop and taking it over: `view` prints a live view
//! URL (view only, or `--mode control`), `takeover` pauses the agent and
//! prints a control view URL, `release` hands the desktop back with a
//! message for the agent.

use serde_json::Value;

use super::{Format, Outcome};
use crate::args::{ReleaseArgs, ViewArgs};
use crate::client::Client;
use crate::display::{out, warn};

/// `GET /v1/tasks/{id}/view?mode=…`: the URL, and until when it opens.
pub async fn view(client: &Client, args: &ViewArgs, format: Format) -> anyhow::Result<Outcome> {
    let query = [("mode", Some(args.mode.as_str().to_owned()))];
    let response = client.get(&["v1", "tasks", &args.id, "view"], &query).await?;
    print_link(&response.raw, &response.value, format)?;
    Ok(Outcome::Success)
}

/// `POST /v1/tasks/{id}/takeover`: the control view's URL.
pub async fn takeover(client: &Client, id: &str, format: Format) -> anyhow::Result<Outcome> {
    let response = client.post(&["v1", "tasks", id, "takeover"], None).await?;
    let view = response.value.get("view").cloned().unwrap_or(Value::Null);
    if format == Format::Human {
        warn(&format!("{id} is yours: the agent pauses after its current action; hand it back with flotilla release {id}"));
    }
    print_link(&response.raw, &view, format)?;
    Ok(Outcome::Success)
}

/// `POST /v1/tasks/{id}/release` with the message.
pub async fn release(client: &Client, args: &ReleaseArgs, format: Format) -> anyhow::Result<Outcome> {
    let mut body = serde_json::json!({});
    if let Some(message) = &args.message {
        body["message"] = Value::String(message.clone());
    }
    let response = client.post(&["v1", "tasks", &args.id, "release"], Some(&body)).await?;
    match format {
        Format::Json => out(&response.raw)?,
        Format::Human => out(&format!("{} handed back", args.id))?,
    }
    Ok(Outcome::Success)
}

/// The view URL on stdout (its expiry on stderr), or the API's JSON.
fn print_link(raw: &str, link: &Value, format: Format) -> anyhow::Result<()> {
    match format {
        Format::Json => out(raw)?,
        Format::Human => {
            let url = link.get("url").and_then(Value::as_str).unwrap_or_default();
            out(url)?;
            if let Some(expires) = link.get("expires_at").and_then(Value::as_str) {
                warn(&format!("opens until {expires}; an open view stays open"));
            }
        }
    }
    Ok(())
}
