//! Connections to Redis.
//!
//! Two kinds: a shared multiplexed connection that pipelines every short
//! command of a process over one socket and reconnects by itself after Redis
//! restarts or drops it, and a pool of dedicated connections for blocking
//! reads (`XREADGROUP … BLOCK`) and subscriptions, which would stall a shared
//! one.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::RedisTarget;
use crate::error::QueueError;

/// How Flotilla talks to Redis.
#[derive(Clone)]
pub struct Redis {
    client: redis::Client,
    shared: ConnectionManager,
    pool: deadpool_redis::Pool,
}

impl Redis {
    /// Connects to the configured Redis, failing if it does not answer.
    pub async fn connect(target: &RedisTarget) -> Result<Self, QueueError> {
        let url = match target {
            RedisTarget::Single(url) => url.clone(),
            RedisTarget::Cluster(urls) => urls[0].clone(),
        };
        let client = redis::Client::open(url.as_str())?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(Duration::from_secs(30)))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let shared = ConnectionManager::new_with_config(client.clone(), manager_config).await?;
        let pool = deadpool_redis::Config::from_url(url)
            .builder()
            .map_err(|e| QueueError::Pool(e.to_string()))?
            .max_size(64)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_redis::Runtime::Tokio1)
            .build()
            .map_err(|e| QueueError::Pool(e.to_string()))?;
        Ok(Self { client, shared, pool })
    }

    /// The shared connection, for short commands and scripts.
    pub fn shared(&self) -> ConnectionManager {
        self.shared.clone()
    }

    /// A connection of one's own, for blocking commands.
    pub async fn dedicated(&self) -> Result<deadpool_redis::Connection, QueueError> {
        Ok(self.pool.get().await?)
    }

    /// A new pub/sub connection.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, QueueError> {
        Ok(self.client.get_async_pubsub().await?)
    }

    /// Whether Redis answers a PING now.
    pub async fn ping(&self) -> bool {
        let mut conn = self.shared();
        let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        pong.is_ok()
    }
}
