//! The end-to-end suites, one module each, linked into one test binary so the API and the
//! worker are linked once.

mod api_events;
mod bad_input;
mod batches;
mod blobstore;
mod blobstore_concurrency;
mod blobstore_faults;
mod claude_code;
mod cluster;
mod computer_use;
mod computer_use_models;
mod dashboard;
mod demo;
mod deploy;
mod desktop_tasks;
mod fairness;
mod faults;
mod feeds;
mod hardening;
mod live_view;
mod model_anthropic;
mod model_claude_toolset;
mod model_openai;
mod pagination;
mod planner;
mod queue;
mod sandbox_isolation;
mod sandbox_lifecycle;
mod schedules;
mod schemathesis;
mod sdk_checks;
mod telemetry;
mod webhooks;
mod worker_http;
