//! One module per command; [`run`] picks the one the arguments name and
//! every command returns how the process should end.

mod batch;
mod eval;
mod listen;
mod mcp;
mod queues;
mod schedules;
mod submit;
mod tasks;
mod usage;
mod view;
mod watch;
mod webhooks;

use serde_json::Value;

use crate::args::{Cli, Command};
use crate::client::{ApiResponse, Client};
use crate::display::out;

/// How a command that did not fail ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    /// It ran, but not everything it waited for succeeded (exit code 1).
    Unsuccessful,
}

/// How results are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Lines and tables for a person.
    Human,
    /// The API's JSON as returned, one object per line for streams.
    Json,
}

/// Runs the command the arguments name.
pub async fn run(cli: Cli) -> anyhow::Result<Outcome> {
    let client = Client::new(&cli.global.api, cli.global.key.clone())?;
    let format = if cli.global.json { Format::Json } else { Format::Human };
    match cli.command {
        Command::Submit(args) => submit::run(&client, &args, format).await,
        Command::Watch(args) => watch::run(&client, &args.ids, format, args.verbose).await,
        Command::Tasks(args) => tasks::list(&client, &args, format).await,
        Command::Task(args) => tasks::show(&client, &args.id, format).await,
        Command::Cancel(args) => tasks::cancel(&client, &args.id, format).await,
        Command::Approve(args) => tasks::answer(&client, &args, "approve", format).await,
        Command::Deny(args) => tasks::answer(&client, &args, "deny", format).await,
        Command::View(args) => view::view(&client, &args, format).await,
        Command::Takeover(args) => view::takeover(&client, &args.id, format).await,
        Command::Release(args) => view::release(&client, &args, format).await,
        Command::Batch(args) => batch::run(&client, &args, format).await,
        Command::Schedules(args) => schedules::run(&client, args.action.as_ref(), format).await,
        Command::Webhooks(args) => webhooks::run(&client, args.action.as_ref(), format).await,
        Command::Queues => queues::run(&client, format).await,
        Command::Usage(args) => usage::run(&client, &args, format).await,
        Command::Mcp => mcp::run(client).await,
        Command::Eval(args) => eval::run(&client, &args.action, format).await,
    }
}

/// Prints an answer: as the API sent it with `--json`, else as the lines
/// `for_a_person` makes of it.
fn print_answer(
    response: &ApiResponse,
    format: Format,
    for_a_person: impl FnOnce(&Value) -> Vec<String>,
) -> anyhow::Result<Outcome> {
    match format {
        Format::Json => out(&response.raw)?,
        Format::Human => {
            for line in for_a_person(&response.value) {
                out(&line)?;
            }
        }
    }
    Ok(Outcome::Success)
}
