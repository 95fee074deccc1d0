//! Webhook delivery beside the task path: the dispatcher turns the tenant
//! feeds' events into messages, the deliverer posts due ones, each on its
//! own timer and with its own concurrency, so a slow or dead endpoint holds
//! up only its own deliveries, never a task: it holds at most
//! `due::PER_ENDPOINT` attempts, each ended by the request timeout, and its
//! backlog waits in its own queue. Any number of workers run this; messages
//! are taken under a lease, so each attempt runs once.

mod client;
mod deliver;

use std::sync::Arc;
use std::time::Duration;

use flotilla_config::{RedisTarget, WebhooksConfig};
use flotilla_queue::queue::Queue;
use flotilla_queue::redis_conn::Redis;
use flotilla_queue::webhooks::dispatch::Dispatcher;
use flotilla_queue::webhooks::Webhooks;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, warn};

use self::deliver::Deliverer;

/// How often the feeds are read for new events: with `dispatch::READ`
/// entries a read, a worker takes up to 800 entries a second of each
/// tenant's feed. While a tenant's tasks end faster than that, the
/// dispatcher falls behind and catches up afterwards (the feed keeps the
/// entries for the retention); the pace bounds what following the feed
/// takes from the drain.
const DISPATCH_EVERY: Duration = Duration::from_millis(250);
/// How often due messages are taken.
const DELIVER_EVERY: Duration = Duration::from_millis(100);
/// Attempts one worker runs at once.
const IN_FLIGHT: usize = 64;

/// Runs until `shutdown` is cancelled, on a Redis connection of its own
/// (see [`own_connection`]); attempts under way are abandoned then, and
/// come due again when their lease ends.
pub async fn run(queue: Queue, target: RedisTarget, config: WebhooksConfig, consumer: String, shutdown: CancellationToken) {
    let Some(queue) = own_connection(&queue, &target, &shutdown).await else { return };
    let hooks = Webhooks::of_queue(&queue, config);
    run_with(queue, hooks, consumer, shutdown).await;
}

/// `queue` over a connection of its own, so that the webhook side's large
/// reads and writes (a feed read, a script storing a read's messages)
/// never queue on the shared connection the task path uses, nor take
/// connections from its pool; `None` at shutdown.
async fn own_connection(queue: &Queue, target: &RedisTarget, shutdown: &CancellationToken) -> Option<Queue> {
    let mut delay = Duration::from_millis(100);
    loop {
        match Redis::connect(target).await {
            Ok(redis) => return Some(queue.on(redis)),
            Err(error) => warn!(%error, "no redis connection for webhooks yet; retrying"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return None,
            () = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

/// [`run`] with a store of one's own (one that resolves names its own way).
pub async fn run_with(queue: Queue, hooks: Webhooks, consumer: String, shutdown: CancellationToken) {
    let dispatcher = Dispatcher::new(queue, hooks.clone(), consumer);
    let deliverer = match Deliverer::new(hooks) {
        Ok(deliverer) => deliverer,
        Err(error) => {
            error!(%error, "no http client for webhook deliveries; none are delivered by this worker");
            return dispatch(dispatcher, shutdown).await;
        }
    };
    tokio::join!(dispatch(dispatcher, shutdown.clone()), deliver(deliverer, shutdown));
}

async fn dispatch(dispatcher: Dispatcher, shutdown: CancellationToken) {
    let mut tick = tokio::time::interval(DISPATCH_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(error) = dispatcher.run_once().await {
            warn!(%error, "reading events for webhooks failed");
        }
    }
}

async fn deliver(deliverer: Deliverer, shutdown: CancellationToken) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    let tracker = TaskTracker::new();
    let mut tick = tokio::time::interval(DELIVER_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        let free = slots.available_permits();
        if free == 0 {
            continue;
        }
        let due = match deliverer.hooks().take_due(free, Deliverer::attempt_limit()).await {
            Ok(due) => due,
            Err(error) => {
                warn!(%error, "taking due webhook messages failed");
                continue;
            }
        };
        for taken in due {
            let Ok(permit) = Arc::clone(&slots).acquire_owned().await else { break };
            let deliverer = deliverer.clone();
            let stop = shutdown.clone();
            tracker.spawn(async move {
                let _permit = permit;
                tokio::select! {
                    () = stop.cancelled() => {}
                    done = deliverer.deliver(&taken) => if let Err(error) = done {
                        warn!(msg_id = %taken.id, %error, "recording a webhook attempt failed");
                    },
                }
            });
        }
    }
    tracker.close();
    tracker.wait().await;
}
