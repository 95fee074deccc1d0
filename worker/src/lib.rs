//! The Flotilla worker: claims tasks from the Redis Streams lanes, runs each
//! through its pipeline with a heartbeat that keeps its lease and hears
//! cancels, writes the outcome through fenced scripts, and acknowledges the
//! entry only after that. Beside the claim loop run the promoter of due
//! tasks and the janitor of expired index entries.

pub mod acker;
pub mod browser;
pub mod execute;
pub mod gateway;
pub mod housekeeping;
pub mod http;
pub use flotilla_sandbox::image;
pub mod live;
pub mod metrics;
pub mod model;
pub mod pipeline;
pub use flotilla_sandbox::http as provider_http;
pub mod sandbox;
pub mod tools;
pub mod webhooks;
pub mod worker;

pub use pipeline::{Outcome, PipelineError, PipelineRunner, Registry, TaskHandle, TaskRun};
pub use worker::{run, run_with, run_with_tools};
