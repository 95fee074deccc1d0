//! Test harness: real `redis-server` processes on free loopback ports, the
//! fleet's own binaries as child processes, and in-process API servers, each
//! with a key prefix of its own so tests run in parallel without colliding.

pub mod api_client;
pub mod browser;
pub mod desktop;
pub mod fakes;
pub mod fleet;
pub mod in_process;
pub mod python;
pub mod redis_server;
pub mod s3_server;
pub mod sdk;
pub mod sdk_examples;
pub mod sdk_rate_limit;
pub mod sse;

pub use api_client::ApiClient;
pub use fleet::{
    admin_key, api_key, config_file, globex_key, spawn_api, spawn_api_with_blobs, test_config, unique_prefix, ApiServer,
    WorkerProcess,
};
pub use in_process::InProcessWorker;
pub use redis_server::{RedisCluster, RedisServer, RedisUnderTest};
pub use sse::{SseFrame, SseReader};
pub mod fair_scenarios;
pub mod scenarios;
pub mod schedule_scenarios;
pub mod tasks;
pub mod vnc;
pub mod wait;

pub use wait::eventually;
