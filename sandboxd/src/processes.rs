//! The processes envd started in one sandbox and still running, by pid:
//! what they were started with (for `Process/List`), their tag, their
//! standard input when the start asked to keep it open, or their
//! [terminal](super::terminal) when they run on one (for `SendInput`,
//! `StreamInput`, `CloseStdin` and `Update`), and its stream's frames for
//! readers that connect later (`Connect`). A process leaves the table when
//! it exits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use flotilla_e2b::envd::ProcessConfig;
use rustix::termios::Winsize;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::broadcast;

use super::sync::lock;
use super::terminal::Terminal;

/// A process's standard input, kept open.
pub(crate) type Stdin = Box<dyn AsyncWrite + Send + Unpin>;

/// One running process.
pub(crate) struct Started {
    pub config: ProcessConfig,
    pub tag: Option<String>,
    stdin: tokio::sync::Mutex<Option<Stdin>>,
    /// The terminal it runs on, if it does.
    terminal: Option<Arc<Terminal>>,
    /// Every frame of its stream from now on, for readers that connect later.
    frames: broadcast::Sender<Vec<u8>>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started").field("config", &self.config).field("tag", &self.tag).finish_non_exhaustive()
    }
}

/// Why input (or a resize) could not reach a process.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum InputError {
    NotFound,
    /// Its standard input is closed or was never kept open.
    Closed,
    /// It runs on no terminal (terminal input or a resize for a process
    /// with pipes).
    NoTerminal,
    /// Its terminal refused the write or the size.
    Terminal(String),
}

/// Input for a process: bytes for its standard input, or typed on its terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Input<'a> {
    Stdin(&'a [u8]),
    Pty(&'a [u8]),
}

/// How a process was started: with its standard input kept open (or not),
/// or on a terminal.
pub(crate) enum Streams {
    Pipes(Option<Stdin>),
    Terminal(Arc<Terminal>),
}

/// The table of one sandbox.
#[derive(Debug, Default)]
pub(crate) struct Processes {
    by_pid: Mutex<HashMap<u32, Arc<Started>>>,
}

impl Processes {
    pub fn insert(
        &self,
        pid: u32,
        config: ProcessConfig,
        tag: Option<String>,
        streams: Streams,
        frames: broadcast::Sender<Vec<u8>>,
    ) {
        let (stdin, terminal) = match streams {
            Streams::Pipes(stdin) => (stdin, None),
            Streams::Terminal(terminal) => (None, Some(terminal)),
        };
        let started = Started { config, tag, stdin: tokio::sync::Mutex::new(stdin), terminal, frames };
        lock(&self.by_pid).insert(pid, Arc::new(started));
    }

    pub fn remove(&self, pid: u32) {
        lock(&self.by_pid).remove(&pid);
    }

    pub fn contains(&self, pid: u32) -> bool {
        lock(&self.by_pid).contains_key(&pid)
    }

    /// The frames process `pid` sends from now on; `None` once it is gone.
    pub fn watch(&self, pid: u32) -> Option<broadcast::Receiver<Vec<u8>>> {
        lock(&self.by_pid).get(&pid).map(|started| started.frames.subscribe())
    }

    /// The pid of the process with `tag`.
    pub fn by_tag(&self, tag: &str) -> Option<u32> {
        lock(&self.by_pid).iter().find(|(_, started)| started.tag.as_deref() == Some(tag)).map(|(pid, _)| *pid)
    }

    /// Every running process, by pid.
    pub fn list(&self) -> Vec<(u32, Arc<Started>)> {
        let mut all: Vec<_> = lock(&self.by_pid).iter().map(|(pid, started)| (*pid, Arc::clone(started))).collect();
        all.sort_by_key(|(pid, _)| *pid);
        all
    }

    fn get(&self, pid: u32) -> Result<Arc<Started>, InputError> {
        lock(&self.by_pid).get(&pid).cloned().ok_or(InputError::NotFound)
    }

    /// Writes `input` to process `pid`'s standard input or terminal.
    pub async fn write_input(&self, pid: u32, input: Input<'_>) -> Result<(), InputError> {
        let started = self.get(pid)?;
        match input {
            Input::Pty(bytes) => {
                let terminal = started.terminal.as_ref().ok_or(InputError::NoTerminal)?;
                terminal.write_all(bytes).await.map_err(|e| InputError::Terminal(e.to_string()))
            }
            Input::Stdin(bytes) => {
                let mut stdin = started.stdin.lock().await;
                let pipe = stdin.as_mut().ok_or(InputError::Closed)?;
                pipe.write_all(bytes).await.map_err(|_| InputError::Closed)?;
                pipe.flush().await.map_err(|_| InputError::Closed)
            }
        }
    }

    /// Sets the size of the terminal process `pid` runs on.
    pub fn resize(&self, pid: u32, size: Winsize) -> Result<(), InputError> {
        let started = self.get(pid)?;
        let terminal = started.terminal.as_ref().ok_or(InputError::NoTerminal)?;
        terminal.resize(size).map_err(|e| InputError::Terminal(e.to_string()))
    }

    /// Closes process `pid`'s standard input (end of file for it).
    pub async fn close_input(&self, pid: u32) -> Result<(), InputError> {
        let started = self.get(pid)?;
        started.stdin.lock().await.take();
        Ok(())
    }
}
