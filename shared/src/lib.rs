//! The crate the Flotilla API and workers share: the task model with its
//! validated ids, progress events, the Redis Streams queue with its batches,
//! schedules, the one typed configuration both processes read at start, and
//! the tracing set-up both binaries share.
//!
//! Nothing here knows about HTTP: errors are plain enums that the API maps to
//! status codes in one place.

pub mod action;
pub mod address;
pub mod apikey;
pub mod blobstore;
pub mod clock;
pub mod config;
pub mod error;
pub mod event;
pub mod ids;
pub mod json_object;
pub mod json_read;
pub mod keys;
pub mod live;
pub mod page;
pub mod queue;
pub mod quota;
pub mod redact;
pub mod redis_conn;
mod redis_lua;
pub mod route;
pub mod schedule;
pub mod task;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
pub mod usage;
pub mod webhooks;

pub use config::Config;
pub use error::{QueueError, ValidationError};
pub use ids::{BatchId, MessageId, ScheduleId, TaskId, TenantId, WebhookId};
