//! One sandbox's polled directory watchers (envd's `CreateWatcher`), by
//! id, each with the events gathered since it was last read; they stop
//! with the sandbox. The calls that fill and read them are
//! [`watch_calls`](super::watch_calls).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::watch::{FsEvent, WatchError};

/// One polled watcher: its events so far, or why it stopped.
#[derive(Debug, Default)]
pub(crate) struct Polled {
    pub events: Vec<FsEvent>,
    pub error: Option<WatchError>,
}

/// A polled watcher and the task that fills it.
#[derive(Debug)]
pub(crate) struct Watcher {
    pub state: Arc<Mutex<Polled>>,
    pub task: tokio::task::AbortHandle,
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One sandbox's polled watchers, by id; they stop with the sandbox.
#[derive(Debug, Default)]
pub(crate) struct Watchers {
    pub by_id: Mutex<HashMap<String, Watcher>>,
}
