//! `flotilla mcp`: the MCP server on stdin and stdout, for an MCP client
//! that starts it (`claude mcp add flotilla -- flotilla mcp`). It acts with
//! the API URL and key every command uses (`FLOTILLA_API_URL`,
//! `FLOTILLA_API_KEY`); stdout carries only the protocol.

use super::Outcome;
use crate::client::Client;

/// Serves until the client closes stdin.
pub async fn run(client: Client) -> anyhow::Result<Outcome> {
    flotilla_mcp::serve_stdio(client).await?;
    Ok(Outcome::Success)
}
