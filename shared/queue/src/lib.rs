//! The queue: Redis Streams with their keys and scripts, task records, batches,
//! fair routed claims, attempts and their leases, quotas, schedules, live-view
//! state, webhook endpoints and their due messages, and paging.
//!
//! The task model itself is `flotilla_types`; the configuration is
//! `flotilla_config`. Nothing here knows about HTTP: errors are plain enums
//! that the API maps to status codes in one place, and webhook delivery is
//! the worker's.

pub mod error;
pub mod keys;
pub mod live;
pub mod page;
pub mod queue;
pub mod quota;
pub mod redis_conn;
mod redis_lua;
pub mod sandbox_owners;
pub mod schedule;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhooks;

pub use error::QueueError;
