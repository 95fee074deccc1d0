//! Background duties every worker shares, with no leader: promoting due
//! tasks (retries after their backoff, `not_before`) into their lanes,
//! firing due schedules, trimming acknowledged entries from the lanes,
//! moving finished tasks past the hot window to the object store,
//! deleting finished tasks past their retention (in Redis and in the
//! store), dropping expired tasks
//! from the tenant indexes, trimming the tenant feeds to the retention,
//! sealing finished batches,
//! and removing the consumers of workers gone for good. Any number of workers
//! may run them at once; each step is an atomic script or idempotent.

use std::time::Duration;

use flotilla_queue::queue::Queue;
use flotilla_types::clock;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

/// How often due tasks are promoted.
const PROMOTE_EVERY: Duration = Duration::from_millis(100);
/// How often due schedules are fired.
const FIRE_EVERY: Duration = Duration::from_secs(1);
/// How often acknowledged entries are trimmed from the lanes, and finished
/// tasks past their retention deleted.
const TRIM_EVERY: Duration = Duration::from_millis(250);
/// How often the tenant indexes are pruned and finished batches sealed.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// How often finished tasks past the hot window move to the store.
const ARCHIVE_EVERY: Duration = Duration::from_secs(5);

/// Runs until `shutdown` is cancelled.
pub async fn run(queue: Queue, shutdown: CancellationToken) {
    let mut promote = tokio::time::interval(PROMOTE_EVERY);
    let mut trim = tokio::time::interval(TRIM_EVERY);
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    let mut fire = tokio::time::interval(FIRE_EVERY);
    let mut archive = tokio::time::interval(ARCHIVE_EVERY);
    archive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    promote.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    fire.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    trim.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    prune.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = promote.tick() => {
                if let Err(e) = queue.housekeeper().promote_due().await {
                    warn!(error = %e, "promoting due tasks failed");
                }
            }
            _ = fire.tick() => {
                if let Err(e) = queue.schedules().fire_due(clock::now_ms()).await {
                    warn!(error = %e, "firing due schedules failed");
                }
            }
            _ = trim.tick() => {
                if let Err(e) = queue.housekeeper().trim_lanes().await {
                    warn!(error = %e, "trimming the lanes failed");
                }
                if let Err(e) = queue.housekeeper().sweep_finished().await {
                    warn!(error = %e, "deleting finished tasks past their retention failed");
                }
            }
            _ = archive.tick() => {
                match queue.housekeeper().archive_finished().await {
                    Ok(pass) if pass.tasks > 0 || pass.entries > 0 => {
                        info!(tasks = pass.tasks, entries = pass.entries, segments = pass.segments, "archived finished tasks");
                    }
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "archiving finished tasks failed"),
                }
            }
            _ = prune.tick() => {
                if let Err(e) = queue.housekeeper().expire_archive().await {
                    warn!(error = %e, "deleting archived tasks past their retention failed");
                }
                if let Err(e) = queue.housekeeper().prune_indexes().await {
                    warn!(error = %e, "pruning task indexes failed");
                }
                if let Err(e) = queue.housekeeper().trim_feeds().await {
                    warn!(error = %e, "trimming the tenant feeds failed");
                }
                if let Err(e) = queue.housekeeper().seal_finished_batches().await {
                    warn!(error = %e, "sealing finished batches failed");
                }
                match queue.housekeeper().forget_gone_consumers().await {
                    Ok(gone) if !gone.is_empty() => info!(?gone, "removed consumers of workers gone for good"),
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "removing gone consumers failed"),
                }
            }
        }
    }
}
