//! The Flotilla MCP server: the fleet's tasks as tools and resources for any
//! Model Context Protocol client (Claude Code, Claude Desktop, …), built on
//! the protocol's official Rust SDK (`rmcp`).
//!
//! There is one implementation, [`FlotillaMcp`], and it talks to the API
//! over HTTP as any client does (`flotilla-client`), so every call is
//! scoped, limited and answered exactly as the API's routes answer it. It
//! is served two ways:
//! - [`serve_stdio`]: `flotilla mcp`, with the API's URL and key from the
//!   command line's settings (`FLOTILLA_API_URL`, `FLOTILLA_API_KEY`);
//! - [`http_service`]: the streamable-HTTP service the API mounts at
//!   `/mcp`. Each request acts with the key it carried, which the API puts
//!   on the request as a [`CallerKey`] once it has checked it.
//!
//! Code map: `server` is the handler (what it offers, which key a request
//! acts with) and its resources; `tools` the tools, `arguments` their
//! inputs, `answer` how an API answer becomes a tool result, `spec_schema`
//! the input schema of `submit_task` (the task spec's own), `wait` the
//! wait with progress notifications, `screenshot` the image a tool or a
//! resource answers, `message` the envelope a request to `/mcp` must hold.

mod answer;
mod arguments;
mod message;
mod screenshot;
mod server;
mod spec_schema;
mod tools;
mod wait;

use std::sync::Arc;
use std::time::Duration;

use flotilla_client::Client;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt;
use tokio_util::sync::CancellationToken;

pub use message::{check_message, message_schema};
pub use server::{CallerKey, FlotillaMcp};

/// How often an open response stream of `/mcp` sends a keep-alive.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Serves MCP on the process's stdin and stdout until the client closes
/// them, acting with `client`'s key.
pub async fn serve_stdio(client: Client) -> std::io::Result<()> {
    let running =
        FlotillaMcp::with_fixed_key(client).serve(rmcp::transport::stdio_pipes()).await.map_err(std::io::Error::other)?;
    running.waiting().await.map_err(std::io::Error::other)?;
    Ok(())
}

/// The streamable-HTTP MCP service, calling the API at `client`'s base URL
/// with each request's [`CallerKey`]; a request body may hold up to
/// `max_body` bytes (a batch's worth); open streams end when `shutdown` is
/// cancelled.
///
/// It keeps no sessions: every request stands alone and carries its key,
/// so no state is shared between callers and any API replica can answer.
/// The `Host` check against DNS rebinding is off: it protects servers that
/// trust whoever reaches them, and every request here must carry a key.
pub fn http_service(
    client: Client,
    max_body: usize,
    shutdown: CancellationToken,
) -> StreamableHttpService<FlotillaMcp, NeverSessionManager> {
    let handler = FlotillaMcp::with_caller_keys(client);
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_sse_keep_alive(Some(SSE_KEEP_ALIVE))
        .with_max_request_body_bytes(max_body)
        .with_cancellation_token(shutdown)
        .disable_allowed_hosts();
    StreamableHttpService::new(move || Ok(handler.clone()), Arc::new(NeverSessionManager::default()), config)
}
