//! A client of the Flotilla API over HTTP, shared by the `flotilla` command
//! line and the MCP server: one place that builds URLs, carries the bearer
//! key and reads the API's errors (`http`), a Server-Sent Events parser
//! (`sse`) and a reconnecting reader of one task's events (`feed`).

pub mod feed;
mod http;
pub mod sse;

pub use http::{ApiError, ApiKey, ApiResponse, Client, ClientError};
