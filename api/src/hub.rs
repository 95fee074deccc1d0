//! The event hub: one Redis subscription per API process, fanned out to
//! every event stream the process serves.
//!
//! Without it each stream would open its own pub/sub connection, and one
//! tenant holding a few thousand streams would exhaust Redis's
//! `maxclients` and stop the fleet. The hub subscribes once, to the pattern
//! of every tenant's channel (each event is published there exactly once),
//! and hands each event to the [`Topic`]s it belongs to (its task, its
//! batch, its tenant) through `tokio::sync::broadcast`.
//!
//! Invariant: once [`Hub::subscribe`] has returned, every event published
//! afterwards reaches the subscription, or the subscription receives
//! [`Live::Resync`] (the Redis subscription broke and was renewed, or the
//! reader fell behind), after which the reader re-reads what it may have
//! missed from storage. Readers therefore subscribe first and read stored
//! history second, as the feeds do.
//!
//! The pattern is subscribed to only while someone follows a topic (or, on
//! a cluster, always: the relay needs every event). A process that serves
//! no stream would otherwise read and route every event for nobody, and
//! while no pattern or channel is subscribed the task scripts leave their
//! `PUBLISH`es out. The first
//! [`Hub::subscribe`] after an idle spell waits for Redis to confirm the
//! pattern; the last [`Subscription`] dropped lets the listener drop it.
//!
//! The hub also keeps the stream limits: [`Hub::admit`] counts the streams
//! each tenant holds open (past the cap: [`HubError::TooManyStreams`], a 429)
//! and gives each a deadline ([`StreamPermit::expires`]) after which it
//! ends, so clients resume with `Last-Event-ID` and no stream lives forever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use flotilla_config::StreamsConfig;
use flotilla_queue::queue::Queue;
use flotilla_types::{BatchId, TaskId, TenantId};
use futures::StreamExt;
use redis::aio::PubSubSink;
use serde::Deserialize;
use tokio::sync::{broadcast, watch, Notify};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::relay::RelaySender;

/// Events a topic buffers for a reader that is behind; past it the reader
/// gets [`Live::Resync`].
const TOPIC_BUFFER: usize = 1_024;
/// How long [`Hub::subscribe`] waits for the Redis subscription.
const READY_WAIT: Duration = Duration::from_secs(5);
/// The first wait before subscribing again; it doubles up to [`RETRY_MAX`].
const RETRY_BASE: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(3);

/// What a subscription follows.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    Task(TaskId),
    Batch(BatchId),
    Tenant(TenantId),
}

/// What a subscription receives.
#[derive(Debug, Clone)]
pub enum Live {
    /// One event, the JSON exactly as published.
    Event(Arc<str>),
    /// Events may have been missed: read stored history again.
    Resync,
}

/// Why the hub refused.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("this tenant already holds {0} open event streams")]
    TooManyStreams(usize),
    #[error("the event subscription is not connected")]
    NotConnected,
}

/// The hub of one API process. Cloning it is cheap.
#[derive(Clone)]
pub struct Hub {
    shared: Arc<Shared>,
}

struct Shared {
    topics: Mutex<Topics>,
    open: Mutex<HashMap<TenantId, usize>>,
    /// Mirrors [`Topics::listening`], changed only under the `topics` lock,
    /// for [`Hub::subscribe`] to wait on.
    listening: watch::Sender<bool>,
    /// Tells the listener that topics came or went.
    changed: Notify,
    limits: StreamsConfig,
}

/// The topics followed and whether their events reach the hub.
#[derive(Default)]
struct Topics {
    senders: HashMap<Topic, broadcast::Sender<Live>>,
    /// The pattern subscription is confirmed and stays while a topic is
    /// followed: it turns false on a lost connection, or while no topic is
    /// followed before the pattern is dropped.
    listening: bool,
}

impl Hub {
    /// Starts the hub's subscription to `queue`'s events; it ends with
    /// `shutdown`. With `relay`, every event heard also goes there (on a
    /// cluster).
    pub fn start(queue: Queue, limits: StreamsConfig, relay: Option<RelaySender>, shutdown: CancellationToken) -> Self {
        let (listening, _) = watch::channel(false);
        let shared =
            Arc::new(Shared { topics: Mutex::default(), open: Mutex::default(), listening, changed: Notify::new(), limits });
        let pattern = queue.event_channel_pattern();
        let listener = Listener { queue, pattern, shared: shared.clone(), relay };
        tokio::spawn(listener.run(shutdown));
        Self { shared }
    }

    /// Follows `topic`; waits (a little) for the Redis subscription to be up.
    pub async fn subscribe(&self, topic: Topic) -> Result<Subscription, HubError> {
        let (subscription, mut listening) = {
            let mut topics = lock(&self.shared.topics);
            let rx = topics.senders.entry(topic.clone()).or_insert_with(|| broadcast::channel(TOPIC_BUFFER).0).subscribe();
            let subscription = Subscription { rx: Some(rx), topic, shared: self.shared.clone() };
            if topics.listening {
                return Ok(subscription);
            }
            (subscription, self.shared.listening.subscribe())
        };
        // Followed from now on, so the listener keeps the pattern once it
        // has it; `listening` turns true only after this topic was added.
        self.shared.changed.notify_one();
        let up = matches!(tokio::time::timeout(READY_WAIT, listening.wait_for(|up| *up)).await, Ok(Ok(_)));
        if !up {
            return Err(HubError::NotConnected);
        }
        Ok(subscription)
    }

    /// Counts one more open stream of `tenant`, refused past the cap.
    pub fn admit(&self, tenant: &TenantId) -> Result<StreamPermit, HubError> {
        let cap = self.shared.limits.per_tenant;
        let mut open = lock(&self.shared.open);
        let count = open.entry(tenant.clone()).or_insert(0);
        if *count >= cap {
            return Err(HubError::TooManyStreams(cap));
        }
        *count += 1;
        let expires = Instant::now() + self.shared.limits.max_lifetime;
        Ok(StreamPermit { tenant: tenant.clone(), expires, shared: self.shared.clone() })
    }

    /// How many streams `tenant` holds open on this process.
    pub fn open_streams(&self, tenant: &TenantId) -> usize {
        lock(&self.shared.open).get(tenant).copied().unwrap_or(0)
    }
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub").field("topics", &lock(&self.shared.topics).senders.len()).finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// One reader of a topic; dropping it forgets the topic once nobody follows it.
pub struct Subscription {
    rx: Option<broadcast::Receiver<Live>>,
    topic: Topic,
    shared: Arc<Shared>,
}

impl Subscription {
    /// The next event, [`Live::Resync`] when some were missed, `None` once
    /// the hub has stopped.
    pub async fn recv(&mut self) -> Option<Live> {
        let rx = self.rx.as_mut()?;
        match rx.recv().await {
            Ok(live) => Some(live),
            Err(broadcast::error::RecvError::Lagged(_)) => Some(Live::Resync),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    }

    /// Whatever is already waiting, without waiting; `None` when nothing is.
    pub fn try_recv(&mut self) -> Option<Live> {
        match self.rx.as_mut()?.try_recv() {
            Ok(live) => Some(live),
            Err(broadcast::error::TryRecvError::Lagged(_)) => Some(Live::Resync),
            Err(_) => None,
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        drop(self.rx.take());
        let mut topics = lock(&self.shared.topics);
        if topics.senders.get(&self.topic).is_some_and(|tx| tx.receiver_count() == 0) {
            topics.senders.remove(&self.topic);
            if topics.senders.is_empty() {
                self.shared.changed.notify_one();
            }
        }
    }
}

/// One open stream of a tenant, counted until dropped.
pub struct StreamPermit {
    tenant: TenantId,
    expires: Instant,
    shared: Arc<Shared>,
}

impl StreamPermit {
    /// When the stream ends at the latest.
    pub fn expires(&self) -> Instant {
        self.expires
    }
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = lock(&self.shared.open);
        if let Some(count) = open.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

/// The fields of an event the hub routes by.
#[derive(Deserialize)]
struct Route<'a> {
    #[serde(borrow)]
    task_id: Option<&'a str>,
    #[serde(borrow)]
    batch_id: Option<&'a str>,
}

/// The task that holds the Redis subscription.
struct Listener {
    queue: Queue,
    pattern: String,
    shared: Arc<Shared>,
    relay: Option<RelaySender>,
}

impl Listener {
    async fn run(self, shutdown: CancellationToken) {
        let mut delay = RETRY_BASE;
        // Whether events may have been missed since the last subscription.
        let mut lost = false;
        while !shutdown.is_cancelled() {
            match self.queue.event_pubsub().await {
                Ok(pubsub) => {
                    delay = RETRY_BASE;
                    let (mut sink, mut messages) = pubsub.split();
                    let mut subscribed = false;
                    // Whether topics may have come or gone since the pattern was last looked at.
                    let mut changed = true;
                    loop {
                        if std::mem::take(&mut changed) {
                            if let Err(error) = self.follow(&mut sink, &mut subscribed, &mut lost).await {
                                tracing::warn!(%error, "subscribing to events failed");
                                break;
                            }
                        }
                        let message = tokio::select! {
                            message = messages.next() => message,
                            () = self.shared.changed.notified() => {
                                changed = true;
                                continue;
                            }
                            () = shutdown.cancelled() => return,
                        };
                        let Some(message) = message else { break };
                        self.dispatch(message.get_channel_name(), message.get_payload_bytes());
                    }
                    self.set_listening(false);
                    lost |= subscribed;
                    tracing::warn!("event subscription lost; subscribing again");
                }
                Err(error) => tracing::warn!(%error, "subscribing to events failed"),
            }
            tokio::select! {
                () = tokio::time::sleep(delay) => {}
                () = shutdown.cancelled() => return,
            }
            delay = (delay * 2).min(RETRY_MAX);
        }
    }

    /// Holds the pattern subscription while a topic is followed (always
    /// with a relay) and drops it when none is; `subscribed` is whether
    /// Redis has it now. Once it is back after a lost connection (`lost`),
    /// every reader is told to re-read what it may have missed.
    async fn follow(&self, sink: &mut PubSubSink, subscribed: &mut bool, lost: &mut bool) -> Result<(), redis::RedisError> {
        let wanted = self.relay.is_some() || !lock(&self.shared.topics).senders.is_empty();
        if wanted && !*subscribed {
            sink.psubscribe(&self.pattern).await?;
            *subscribed = true;
            if std::mem::take(lost) {
                self.resync_all();
            }
            self.set_listening(true);
        } else if !wanted && *subscribed {
            // Decided under the lock: a topic added from here on waits for
            // the pattern to be subscribed again.
            let idle = {
                let mut topics = lock(&self.shared.topics);
                let idle = topics.senders.is_empty();
                if idle {
                    topics.listening = false;
                    self.shared.listening.send_replace(false);
                }
                idle
            };
            if idle {
                sink.punsubscribe(&self.pattern).await?;
                *subscribed = false;
            }
        }
        Ok(())
    }

    /// Records whether the pattern subscription is up, under the topics lock.
    fn set_listening(&self, up: bool) {
        let mut topics = lock(&self.shared.topics);
        topics.listening = up;
        self.shared.listening.send_replace(up);
    }

    /// Tells every reader that events may have been missed.
    fn resync_all(&self) {
        for tx in lock(&self.shared.topics).senders.values() {
            let _ = tx.send(Live::Resync);
        }
    }

    /// Hands one event to its task's, batch's and tenant's topics.
    fn dispatch(&self, channel: &str, payload: &[u8]) {
        let Some(tenant) = channel.rsplit(':').next().and_then(|t| TenantId::parse(t).ok()) else { return };
        let Ok(raw) = std::str::from_utf8(payload) else { return };
        let route: Route<'_> = serde_json::from_str(raw).unwrap_or(Route { task_id: None, batch_id: None });
        let event: Arc<str> = Arc::from(raw);
        if let Some(relay) = &self.relay {
            relay.send(tenant.clone(), event.clone());
        }
        let mut wanted = vec![Topic::Tenant(tenant)];
        wanted.extend(route.task_id.and_then(|t| TaskId::parse(t).ok()).map(Topic::Task));
        wanted.extend(route.batch_id.and_then(|b| BatchId::parse(b).ok()).map(Topic::Batch));
        let topics = lock(&self.shared.topics);
        let senders: Vec<_> = wanted.iter().filter_map(|t| topics.senders.get(t)).collect();
        for tx in senders {
            let _ = tx.send(Live::Event(event.clone()));
        }
    }
}
