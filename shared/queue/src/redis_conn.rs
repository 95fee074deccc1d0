//! Connections to Redis, a single server or a cluster.
//!
//! Two kinds: a shared multiplexed connection that pipelines every short
//! command of a process over one socket (per node) and reconnects by itself
//! after Redis restarts or drops it, and connections of their own for
//! blocking reads (`XREADGROUP … BLOCK`) and subscriptions, which would stall
//! a shared one.
//!
//! On a cluster a pipeline may only touch one slot, so commands that span
//! slots go through [`Redis::query_many`], which pipelines them on a single
//! server and sends them concurrently on a cluster.

use std::time::Duration;

use futures::future::{join_all, BoxFuture, FutureExt};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisFuture, Value};

use crate::error::QueueError;
use flotilla_config::RedisTarget;

/// How long one reply may take; above the longest blocking read.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

/// A shared connection to a server or a cluster.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(&'a mut self, pipeline: &'a Pipeline, offset: usize, count: usize) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// A connection for blocking reads.
pub enum Dedicated {
    Pooled(deadpool_redis::Connection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Dedicated::Pooled(c) => c.req_packed_command(cmd),
            Dedicated::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(&'a mut self, pipeline: &'a Pipeline, offset: usize, count: usize) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Dedicated::Pooled(c) => c.req_packed_commands(pipeline, offset, count),
            Dedicated::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Dedicated::Pooled(c) => c.get_db(),
            Dedicated::Cluster(c) => c.get_db(),
        }
    }
}

/// How a process reaches Redis.
#[derive(Clone)]
enum Backend {
    Single { shared: ConnectionManager, pool: deadpool_redis::Pool },
    Cluster { shared: ClusterConnection, blocking: ClusterConnection },
}

/// How Flotilla talks to Redis.
#[derive(Clone)]
pub struct Redis {
    /// A client of one node, for subscriptions: on a cluster a message
    /// published on any node reaches subscribers on every node.
    subscriber: redis::Client,
    backend: Backend,
}

impl Redis {
    /// Connects to the configured Redis, failing if it does not answer.
    pub async fn connect(target: &RedisTarget) -> Result<Self, QueueError> {
        match target {
            RedisTarget::Single(url) => Self::connect_single(url).await,
            RedisTarget::Cluster(urls) => Self::connect_cluster(urls).await,
        }
    }

    async fn connect_single(url: &str) -> Result<Self, QueueError> {
        let client = redis::Client::open(url)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
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
        Ok(Self { subscriber: client, backend: Backend::Single { shared, pool } })
    }

    async fn connect_cluster(urls: &[String]) -> Result<Self, QueueError> {
        let client = ClusterClient::builder(urls.to_vec())
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(3)
            .build()?;
        let shared = client.get_async_connection().await?;
        let blocking = client.get_async_connection().await?;
        let subscriber = redis::Client::open(urls[0].as_str())?;
        Ok(Self { subscriber, backend: Backend::Cluster { shared, blocking } })
    }

    /// Whether this is a cluster, where one script or pipeline may touch
    /// only one slot.
    pub fn is_cluster(&self) -> bool {
        matches!(self.backend, Backend::Cluster { .. })
    }

    /// The shared connection, for short commands and scripts.
    pub fn shared(&self) -> Conn {
        match &self.backend {
            Backend::Single { shared, .. } => Conn::Single(shared.clone()),
            Backend::Cluster { shared, .. } => Conn::Cluster(shared.clone()),
        }
    }

    /// A connection for blocking commands. Only one blocking read may use
    /// it at a time on a cluster, which is how the claim loop uses it.
    pub async fn dedicated(&self) -> Result<Dedicated, QueueError> {
        match &self.backend {
            Backend::Single { pool, .. } => Ok(Dedicated::Pooled(pool.get().await?)),
            Backend::Cluster { blocking, .. } => Ok(Dedicated::Cluster(blocking.clone())),
        }
    }

    /// A new pub/sub connection.
    pub async fn pubsub(&self) -> Result<redis::aio::PubSub, QueueError> {
        Ok(self.subscriber.get_async_pubsub().await?)
    }

    /// Runs commands that may touch several slots, replies in order: one
    /// pipeline on a single server, concurrent commands on a cluster.
    pub async fn query_many<T: FromRedisValue>(&self, cmds: Vec<Cmd>) -> Result<Vec<T>, QueueError> {
        if cmds.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.shared();
        if !self.is_cluster() {
            let mut pipe = redis::pipe();
            for cmd in cmds {
                pipe.add_command(cmd);
            }
            return Ok(pipe.query_async(&mut conn).await?);
        }
        let sends: Vec<BoxFuture<'_, redis::RedisResult<T>>> = cmds
            .into_iter()
            .map(|cmd| {
                let mut conn = conn.clone();
                async move { cmd.query_async(&mut conn).await }.boxed()
            })
            .collect();
        join_all(sends).await.into_iter().map(|r| r.map_err(QueueError::from)).collect()
    }

    /// Whether Redis answers a PING now.
    pub async fn ping(&self) -> bool {
        let mut conn = self.shared();
        let pong: Result<String, _> = redis::cmd("PING").query_async(&mut conn).await;
        pong.is_ok()
    }
}
