//! `flotilla submit`: builds a spec from the flags (and `--spec`), posts it,
//! prints the new task's id, and with `--watch` follows it.

use anyhow::Context;
use serde_json::Value;

use super::{watch, Format, Outcome};
use crate::args::SubmitArgs;
use crate::client::Client;
use crate::display::out;
use crate::spec::{build_spec, read_spec_file};

pub async fn run(client: &Client, args: &SubmitArgs, format: Format) -> anyhow::Result<Outcome> {
    let base = args.spec.as_deref().map(read_spec_file).transpose()?;
    let spec = build_spec(args, base)?;
    let response = client.post(&["v1", "tasks"], Some(&spec)).await?;
    let id = response.value.get("id").and_then(Value::as_str).map(str::to_owned);
    match (format, &id) {
        (Format::Human, Some(id)) => out(id)?,
        _ => out(&response.raw)?,
    }
    if !args.watch {
        return Ok(Outcome::Success);
    }
    let id = id.context("the API's answer has no task id to watch")?;
    watch::run(client, &[id], format, false).await
}
