//! The worker's side of the lanes: reading new entries in priority order,
//! taking over entries of workers presumed dead, promoting due tasks, and
//! acknowledging finished ones.

use std::time::Duration;

use redis::streams::{StreamAutoClaimOptions, StreamAutoClaimReply, StreamId, StreamReadOptions, StreamReadReply};
use redis::AsyncCommands;

use super::{scripts, Queue};
use crate::clock;
use crate::error::QueueError;
use crate::ids::TaskId;
use crate::keys::GROUP;
use crate::task::Priority;

/// How many due tasks one promoter pass moves per lane.
const PROMOTE_BATCH: usize = 500;
/// How many finished tasks one sweep call deletes at most.
const SWEEP_BATCH: usize = 500;
/// The most sweep calls one pass makes (so a pass keeps up with 10 000
/// ended tasks per pass).
const SWEEP_ROUNDS: usize = 20;

/// One stream entry handed to a worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub lane: Priority,
    pub entry_id: String,
    /// `None` when the entry is malformed; it is acknowledged and dropped.
    pub task_id: Option<TaskId>,
    /// Taken over from a worker presumed dead, rather than read new. A new
    /// entry of a task that is already running is a second entry of that
    /// task (its running attempt holds the first) and starts nothing.
    pub reclaimed: bool,
}

impl Delivery {
    fn from_entry(lane: Priority, entry: &StreamId, reclaimed: bool) -> Self {
        let task_id = entry.get::<String>("t").and_then(|t| TaskId::parse(&t).ok());
        Self { lane, entry_id: entry.id.clone(), task_id, reclaimed }
    }
}

impl Queue {
    /// Creates the consumer group on every lane (reading from the start, so
    /// tasks queued before any worker existed are delivered).
    pub async fn ensure_groups(&self) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        for lane in Priority::ALL {
            let created: Result<(), redis::RedisError> = conn.xgroup_create_mkstream(self.keys.lane(lane), GROUP, "0").await;
            match created {
                Ok(()) => {}
                Err(e) if e.code() == Some("BUSYGROUP") => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reads up to `count` new entries, high lane first, without waiting.
    pub async fn claim_now(&self, consumer: &str, count: usize) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.redis.shared();
        let mut inv = scripts::CLAIM.prepare_invoke();
        for lane in Priority::ALL {
            inv.key(self.keys.lane(lane));
        }
        inv.arg(GROUP).arg(consumer).arg(count);
        let flat: Vec<String> = match inv.invoke_async(&mut conn).await {
            Ok(flat) => flat,
            Err(e) if e.to_string().contains("NOGROUP") => {
                // Redis lost the group (restarted without persistence): make it again.
                self.ensure_groups().await?;
                return Ok(Vec::new());
            }
            Err(e) => return Err(e.into()),
        };
        Ok(flat
            .chunks_exact(3)
            .filter_map(|c| {
                let lane = Priority::from_lane_number(&c[0])?;
                Some(Delivery { lane, entry_id: c[1].clone(), task_id: TaskId::parse(&c[2]).ok(), reclaimed: false })
            })
            .collect())
    }

    /// Waits up to `block` for one new entry on any lane; at most one per lane
    /// comes back.
    pub async fn claim_blocking(&self, consumer: &str, block: Duration) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.redis.dedicated().await?;
        let lanes: Vec<String> = Priority::ALL.iter().map(|p| self.keys.lane(*p)).collect();
        let opts = StreamReadOptions::default().group(GROUP, consumer).count(1).block(block.as_millis() as usize);
        let reply: Option<StreamReadReply> = self.read_group(&mut conn, &lanes, opts).await?;
        let mut got = deliveries(reply);
        got.sort_by_key(|d| d.lane.lane_number());
        Ok(got)
    }

    async fn read_group<C: redis::aio::ConnectionLike + Send + Sync>(
        &self,
        conn: &mut C,
        lanes: &[String],
        opts: StreamReadOptions,
    ) -> Result<Option<StreamReadReply>, QueueError> {
        let ids: Vec<&str> = lanes.iter().map(|_| ">").collect();
        let read: Result<Option<StreamReadReply>, redis::RedisError> = conn.xread_options(lanes, &ids, &opts).await;
        match read {
            Ok(reply) => Ok(reply.map(|mut r| {
                for key in &mut r.keys {
                    key.key = self.lane_name(&key.key).to_owned();
                }
                r
            })),
            Err(e) if e.code() == Some("NOGROUP") => {
                // Redis lost the group (restarted without persistence): make it again.
                self.ensure_groups().await?;
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The lane name (`high`, …) of a lane key.
    fn lane_name<'a>(&self, key: &'a str) -> &'a str {
        key.rsplit(':').next().unwrap_or(key)
    }

    /// Takes over up to `count` entries that have been pending longer than
    /// the lease: their worker is presumed dead.
    pub async fn reclaim(&self, consumer: &str, count: usize) -> Result<Vec<Delivery>, QueueError> {
        let mut conn = self.redis.shared();
        let min_idle = self.settings.lease.as_millis() as usize;
        let mut got = Vec::new();
        for lane in Priority::ALL {
            let wanted = count - got.len();
            if wanted == 0 {
                break;
            }
            let opts = StreamAutoClaimOptions::default().count(wanted);
            let reply: Result<StreamAutoClaimReply, redis::RedisError> =
                conn.xautoclaim_options(self.keys.lane(lane), GROUP, consumer, min_idle, "0-0", opts).await;
            match reply {
                Ok(reply) => got.extend(reply.claimed.iter().map(|e| Delivery::from_entry(lane, e, true))),
                Err(e) if e.code() == Some("NOGROUP") => self.ensure_groups().await?,
                Err(e) => return Err(e.into()),
            }
        }
        Ok(got)
    }

    /// Keeps an entry this worker still works on from looking idle.
    pub async fn touch(&self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        self.set_idle(consumer, delivery, 0).await
    }

    /// Hands an entry this worker gives up on back at once: it is marked as
    /// idle for a whole lease, so the next reclaim by any worker takes it.
    pub async fn release(&self, consumer: &str, delivery: &Delivery) -> Result<(), QueueError> {
        self.set_idle(consumer, delivery, self.settings.lease.as_millis() as u64).await
    }

    async fn set_idle(&self, consumer: &str, delivery: &Delivery, idle_ms: u64) -> Result<(), QueueError> {
        let mut conn = self.redis.shared();
        let _: redis::Value = redis::cmd("XCLAIM")
            .arg(self.keys.lane(delivery.lane))
            .arg(GROUP)
            .arg(consumer)
            .arg(0)
            .arg(&delivery.entry_id)
            .arg("IDLE")
            .arg(idle_ms)
            .arg("JUSTID")
            .query_async(&mut conn)
            .await?;
        Ok(())
    }

    /// Acknowledges finished entries, counting outcomes
    /// (`succeeded`, `failed`, …) in the same round trip.
    pub async fn ack(&self, done: &[(Delivery, Option<&'static str>)]) -> Result<(), QueueError> {
        if done.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        for lane in Priority::ALL {
            let ids: Vec<&str> = done.iter().filter(|(d, _)| d.lane == lane).map(|(d, _)| d.entry_id.as_str()).collect();
            if ids.is_empty() {
                continue;
            }
            pipe.xack(self.keys.lane(lane), GROUP, &ids).ignore();
        }
        let mut counts: Vec<(&str, i64)> = Vec::new();
        for outcome in done.iter().filter_map(|(_, o)| *o) {
            match counts.iter_mut().find(|(name, _)| *name == outcome) {
                Some((_, n)) => *n += 1,
                None => counts.push((outcome, 1)),
            }
        }
        for (outcome, n) in counts {
            pipe.hincr(self.keys.outcomes(), outcome, n).ignore();
        }
        let mut conn = self.redis.shared();
        let () = pipe.query_async(&mut conn).await?;
        Ok(())
    }

    /// Drops acknowledged entries from the head of every lane (see
    /// [`scripts::TRIM`]). Returns how many went.
    pub async fn trim_lanes(&self) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let mut trimmed = 0;
        for lane in Priority::ALL {
            let n: usize = scripts::TRIM.key(self.keys.lane(lane)).arg(GROUP).invoke_async(&mut conn).await?;
            trimmed += n;
        }
        Ok(trimmed)
    }

    /// Removes the consumer entries of workers gone for good: idle for ten
    /// leases and holding nothing (their entries were reclaimed first).
    /// Returns the names removed.
    pub async fn forget_gone_consumers(&self) -> Result<Vec<String>, QueueError> {
        let mut conn = self.redis.shared();
        let gone_after_ms = self.settings.lease.as_millis() as u64 * 10;
        let mut removed = Vec::new();
        for lane in Priority::ALL {
            let names: Vec<String> = scripts::FORGET_GONE_CONSUMERS
                .key(self.keys.lane(lane))
                .arg(GROUP)
                .arg(gone_after_ms)
                .invoke_async(&mut conn)
                .await?;
            removed.extend(names);
        }
        Ok(removed)
    }

    /// Deletes the tasks of the finished index whose retention has passed
    /// (see [`scripts::SWEEP_FINISHED`]); returns how many left the index.
    /// Nothing to do on a cluster, where every ended task has a TTL.
    pub async fn sweep_finished(&self) -> Result<usize, QueueError> {
        if self.redis.is_cluster() {
            return Ok(0);
        }
        let cutoff = clock::now_ms() - self.retention_ms() as i64;
        let mut conn = self.redis.shared();
        let mut swept = 0;
        for _ in 0..SWEEP_ROUNDS {
            let n: usize = scripts::SWEEP_FINISHED
                .key(self.keys.finished())
                .arg(cutoff)
                .arg(SWEEP_BATCH)
                .arg(self.keys.task_prefix())
                .invoke_async(&mut conn)
                .await?;
            swept += n;
            if n < SWEEP_BATCH {
                break;
            }
        }
        Ok(swept)
    }

    /// Moves tasks whose time has come from the due sets into their lanes.
    /// Returns how many moved.
    pub async fn promote_due(&self) -> Result<usize, QueueError> {
        let mut conn = self.redis.shared();
        let now = clock::now_ms();
        let mut moved = 0;
        for lane in Priority::ALL {
            let n: usize = scripts::PROMOTE
                .key(self.keys.due(lane))
                .key(self.keys.lane(lane))
                .arg(now)
                .arg(PROMOTE_BATCH)
                .invoke_async(&mut conn)
                .await?;
            moved += n;
        }
        Ok(moved)
    }
}

fn deliveries(reply: Option<StreamReadReply>) -> Vec<Delivery> {
    let Some(reply) = reply else { return Vec::new() };
    let mut got = Vec::new();
    for key in &reply.keys {
        let Some(lane) = Priority::parse(&key.key) else { continue };
        got.extend(key.ids.iter().map(|e| Delivery::from_entry(lane, e, false)));
    }
    got
}
