//! The plain types of Flotilla's task model, shared by the API, the workers,
//! the CLI and clients: validated ids, the task spec and record, actions,
//! progress events, usage, routes, the clock, redaction and validation errors.
//!
//! Data and the rules that keep it valid, nothing more: no Redis, no object
//! store, no HTTP client, no telemetry exporter (the layering test
//! `layering::the_types_crate_links_no_io_crate` checks the dependency
//! tree). The OpenAPI schemas of these types are behind the `openapi`
//! feature, which the API enables.

pub mod action;
pub mod address;
pub mod clock;
pub mod cost;
pub mod error;
pub mod eval;
pub mod eval_plan;
pub mod eval_report;
pub mod event;
pub mod ids;
pub mod json_object;
pub mod json_read;
pub mod open;
pub mod record;
pub mod redact;
pub mod route;
pub mod signing;
pub mod task;
pub mod usage;

pub use error::ValidationError;
pub use ids::{BatchId, MessageId, ScheduleId, TaskId, TenantId, WebhookId};
