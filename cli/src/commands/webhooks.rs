//! `flotilla webhooks`: lists a tenant's webhook endpoints, or adds or
//! removes one, lists an endpoint's deliveries or delivers a message again,
//! or listens for deliveries through the API (`listen`, see [`super::listen`]).

use serde_json::{json, Value};

use super::{Format, Outcome};
use crate::args::{AddWebhookArgs, WebhookAction};
use crate::client::Client;
use crate::display::{aligned, cell, out, warn};

pub async fn run(client: &Client, action: Option<&WebhookAction>, format: Format) -> anyhow::Result<Outcome> {
    match action {
        None | Some(WebhookAction::Ls) => list(client, format).await,
        Some(WebhookAction::Add(args)) => add(client, args, format).await,
        Some(WebhookAction::Rm(args)) => {
            client.delete(&["v1", "webhooks", &args.id]).await?;
            match format {
                Format::Json => out(&json!({"id": args.id, "deleted": true}).to_string())?,
                Format::Human => out(&format!("{} removed", args.id))?,
            }
            Ok(Outcome::Success)
        }
        Some(WebhookAction::Deliveries(args)) => deliveries(client, &args.id, format).await,
        Some(WebhookAction::Listen(args)) => super::listen::run(client, args, format).await,
        Some(WebhookAction::Retry(args)) => {
            let response = client.post(&["v1", "webhooks", &args.id, "deliveries", &args.msg_id, "retry"], None).await?;
            match format {
                Format::Json => out(&response.raw)?,
                Format::Human => out(&format!("{} due again now", args.msg_id))?,
            }
            Ok(Outcome::Success)
        }
    }
}

async fn add(client: &Client, args: &AddWebhookArgs, format: Format) -> anyhow::Result<Outcome> {
    let mut body = json!({"url": args.url, "events": args.events});
    if let Some(batch) = &args.batch {
        body["batch_id"] = json!(batch);
    }
    let response = client.post(&["v1", "webhooks"], Some(&body)).await?;
    match format {
        Format::Json => out(&response.raw)?,
        Format::Human => {
            out(&format!("{}  secret {}", cell(response.value.get("id")), cell(response.value.get("secret"))))?;
            warn("keep the secret: it signs every delivery and is not shown again");
        }
    }
    Ok(Outcome::Success)
}

async fn list(client: &Client, format: Format) -> anyhow::Result<Outcome> {
    let endpoints = client.get_all(&["v1", "webhooks"], "webhooks").await?;
    if format == Format::Json {
        out(&json!({ "webhooks": endpoints }).to_string())?;
        return Ok(Outcome::Success);
    }
    if endpoints.is_empty() {
        warn("no webhooks");
        return Ok(Outcome::Success);
    }
    for line in aligned(["ID", "URL", "EVENTS", "BATCH", "DISABLED"], endpoints.iter().map(endpoint_row)) {
        out(&line)?;
    }
    Ok(Outcome::Success)
}

async fn deliveries(client: &Client, id: &str, format: Format) -> anyhow::Result<Outcome> {
    let deliveries = client.get_all(&["v1", "webhooks", id, "deliveries"], "deliveries").await?;
    if format == Format::Json {
        out(&json!({ "deliveries": deliveries }).to_string())?;
        return Ok(Outcome::Success);
    }
    if deliveries.is_empty() {
        warn("no deliveries");
        return Ok(Outcome::Success);
    }
    let header = ["MSG ID", "TYPE", "STATUS", "ATTEMPTS", "CODE", "LATENCY MS", "CREATED", "ERROR"];
    for line in aligned(header, deliveries.iter().map(delivery_row)) {
        out(&line)?;
    }
    Ok(Outcome::Success)
}

fn endpoint_row(endpoint: &Value) -> [String; 5] {
    let events = endpoint
        .get("events")
        .and_then(Value::as_array)
        .map(|types| types.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(","));
    [
        cell(endpoint.get("id")),
        cell(endpoint.get("url")),
        events.unwrap_or_else(|| "-".to_owned()),
        cell(endpoint.get("batch_id")),
        cell(endpoint.get("disabled")),
    ]
}

fn delivery_row(delivery: &Value) -> [String; 8] {
    [
        cell(delivery.get("msg_id")),
        cell(delivery.get("type")),
        cell(delivery.get("status")),
        cell(delivery.get("attempts")),
        cell(delivery.get("response_code")),
        cell(delivery.get("latency_ms")),
        cell(delivery.get("created_at")),
        cell(delivery.get("error")),
    ]
}
