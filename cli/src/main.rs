//! `flotilla`: the command-line client of the Flotilla API.
//!
//! This file only parses arguments, runs the command and maps the result to
//! an exit code: 0 when everything succeeded, 1 when a watched task did not
//! succeed, 2 on any error (printed as one line on stderr).

mod args;
mod commands;
mod display;
mod json_text;
mod osworld;
mod progress;
mod record;
mod spec;
mod task_summary;

// The API client the commands share with the MCP server.
use flotilla_client as client;
use flotilla_client::feed;

use std::process::ExitCode;

use commands::Outcome;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = args::parse();
    match commands::run(cli).await {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::Unsuccessful) => ExitCode::from(1),
        Err(err) if display::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            display::warn(&display::error_line(&err));
            ExitCode::from(2)
        }
    }
}
