//! The one seam between the queue and a worker's claim loop:
//! [`Claimer::next`] hands a worker up to as many started attempts as it has
//! free slots. Behind it: taking over the entries of workers whose liveness
//! mark ran out (every quarter liveness, see `liveness`) and of workers
//! presumed dead by the lease (every quarter lease), tenants taking turns by weight within their
//! `max_running`, and starting each task's attempt — on a single server
//! claimed and started in one script, on a cluster one shard at a time
//! (lowest virtual time first), started on the tasks' own slots next. The
//! worker never branches on topology. An idle worker waits with
//! [`Claimer::wait_for_work`], which on a single server returns as soon as
//! tasks go into lanes (the shard's `wake` signal) and otherwise sleeps.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::{Delivery, Queue, StartOutcome};
use crate::error::QueueError;
use crate::keys::Shard;
use crate::redis_conn::Dedicated;
use flotilla_types::route::{Capabilities, Route};

/// One entry handed to a worker and what starting it gave.
#[derive(Debug)]
pub struct Claim {
    pub delivery: Delivery,
    /// An error means the attempt did not start; the entry will be
    /// reclaimed.
    pub outcome: Result<StartOutcome, QueueError>,
}

/// A worker's source of work; see the module doc.
#[derive(Debug)]
pub struct Claimer {
    queue: Queue,
    worker: String,
    caps: Capabilities,
    last_reclaim: Option<Instant>,
    /// When the entries of workers whose liveness ran out were last looked for.
    last_dead_check: Option<Instant>,
    wake: WakeConnection,
}

/// The connection an idle worker blocks on, made at its first wait and
/// dropped after an error (the next wait makes a new one).
#[derive(Default)]
struct WakeConnection(Option<Dedicated>);

impl std::fmt::Debug for WakeConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() { "WakeConnection(open)" } else { "WakeConnection(none)" })
    }
}

impl Queue {
    /// The claim seam for worker `worker`, which can run what `caps` says.
    pub fn claimer(&self, worker: impl Into<String>, caps: Capabilities) -> Claimer {
        Claimer {
            queue: self.clone(),
            worker: worker.into(),
            caps,
            last_reclaim: None,
            last_dead_check: None,
            wake: WakeConnection::default(),
        }
    }
}

impl Claimer {
    /// Up to `free` entries with their attempts started, entries of workers
    /// presumed dead first. Empty when there is nothing to run now (the
    /// caller waits a little and asks again).
    pub async fn next(&mut self, free: usize) -> Result<Vec<Claim>, QueueError> {
        if free == 0 {
            return Ok(Vec::new());
        }
        if self.dead_check_due() {
            self.last_dead_check = Some(Instant::now());
            let taken = self.queue.reclaim_dead(&self.worker, &self.caps, free).await?;
            if !taken.is_empty() {
                return self.start(taken).await;
            }
        }
        if self.reclaim_due() {
            self.last_reclaim = Some(Instant::now());
            let taken = self.queue.runner().reclaim(&self.worker, &self.caps, free).await?;
            if !taken.is_empty() {
                return self.start(taken).await;
            }
        }
        if !self.queue.redis.is_cluster() {
            let started = self.queue.claim_and_start(&self.worker, &self.caps, free).await?;
            return Ok(started.into_iter().map(|(delivery, outcome)| Claim { delivery, outcome }).collect());
        }
        let got = self.claim_on_cluster(free).await?;
        self.start(got).await
    }

    /// Waits about `at_most` for tasks to become claimable: on a single
    /// server until a call that makes some claimable signals (`BZPOPMIN` on
    /// the shard's `wake`), so an idle worker starts a new task at once
    /// instead of at its next poll; on a cluster, or when the wait fails, it
    /// sleeps. Redis ends a blocked wait on its timer, so without a signal
    /// the wait lasts `at_most` rounded up to it (about 100 ms at the
    /// default `hz` 10). Either way the caller claims next.
    pub async fn wait_for_work(&mut self, at_most: Duration) {
        if self.queue.redis.is_cluster() {
            return tokio::time::sleep(at_most).await;
        }
        let started = Instant::now();
        if self.wake.0.is_none() {
            self.wake.0 = self.queue.redis.dedicated().await.ok();
        }
        let Some(conn) = self.wake.0.as_mut() else {
            return tokio::time::sleep(at_most.saturating_sub(started.elapsed())).await;
        };
        let signal: redis::RedisResult<redis::Value> =
            redis::cmd("BZPOPMIN").arg(self.queue.keys.wake(Shard(0))).arg(at_most.as_secs_f64()).query_async(conn).await;
        if signal.is_err() {
            self.wake.0 = None;
            tokio::time::sleep(at_most.saturating_sub(started.elapsed())).await;
        }
    }

    /// The worker's id, as its entries' consumer.
    pub fn worker(&self) -> &str {
        &self.worker
    }

    /// Every quarter of the liveness: a dead worker's tasks are taken
    /// within about 1¼ liveness of its last mark.
    fn dead_check_due(&self) -> bool {
        let every: Duration = self.queue.settings.liveness / 4;
        self.last_dead_check.is_none_or(|at| at.elapsed() >= every)
    }

    fn reclaim_due(&self) -> bool {
        let every: Duration = self.queue.settings.lease / 4;
        self.last_reclaim.is_none_or(|at| at.elapsed() >= every)
    }

    /// Takes turns shard by shard, the shard whose next tenant (on the
    /// routes this worker serves) has the lowest virtual time first, so
    /// turns stay fair across shards.
    async fn claim_on_cluster(&self, free: usize) -> Result<Vec<Delivery>, QueueError> {
        let mut got = Vec::new();
        for shard in self.shards_in_turn_order().await? {
            if got.len() >= free {
                break;
            }
            got.extend(self.queue.runner().claim_turns(shard, &self.worker, &self.caps, free - got.len()).await?);
        }
        Ok(got)
    }

    /// The shards with a tenant ready on a route this worker serves, that
    /// tenant's virtual time lowest first: every shard's routes with queued
    /// entries in one round trip, then the head of each served route's turn
    /// order in another.
    async fn shards_in_turn_order(&self) -> Result<Vec<Shard>, QueueError> {
        let keys = &self.queue.keys;
        let shards: Vec<Shard> = keys.shards().collect();
        let routes: Vec<HashMap<String, i64>> =
            self.queue.redis.query_many(shards.iter().map(|s| redis::Cmd::hgetall(keys.shard_routes(*s))).collect()).await?;
        let served: Vec<(Shard, String)> = shards
            .iter()
            .zip(routes)
            .flat_map(|(shard, routes)| routes.into_iter().map(move |(route, queued)| (*shard, route, queued)))
            .filter(|(_, route, queued)| *queued > 0 && Route::parse(route).is_some_and(|r| self.caps.serves(&r)))
            .map(|(shard, route, _)| (shard, route))
            .collect();
        let heads = served.iter().map(|(shard, route)| {
            redis::cmd("ZRANGE").arg(keys.active_route(*shard, route)).arg(0).arg(0).arg("WITHSCORES").clone()
        });
        let heads: Vec<Vec<(String, f64)>> = self.queue.redis.query_many(heads.collect()).await?;
        let mut lowest: HashMap<Shard, f64> = HashMap::new();
        for ((shard, _), head) in served.iter().zip(&heads) {
            if let Some((_, vt)) = head.first() {
                let best = lowest.entry(*shard).or_insert(*vt);
                *best = best.min(*vt);
            }
        }
        let mut order: Vec<(f64, Shard)> = lowest.into_iter().map(|(shard, vt)| (vt, shard)).collect();
        order.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        Ok(order.into_iter().map(|(_, shard)| shard).collect())
    }

    async fn start(&self, deliveries: Vec<Delivery>) -> Result<Vec<Claim>, QueueError> {
        let outcomes = self.queue.runner().start_many(&deliveries, &self.worker).await?;
        let mut outcomes = outcomes.into_iter();
        Ok(deliveries
            .into_iter()
            .map(|delivery| {
                let outcome = outcomes.next().unwrap_or(Err(QueueError::Corrupt("start gave fewer answers than entries".into())));
                Claim { delivery, outcome }
            })
            .collect())
    }
}
