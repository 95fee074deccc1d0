//! What can go wrong with a sandbox, in terms a pipeline can act on: a
//! sandbox that is gone (`NotFound`, `Expired`) ends the attempt, a provider
//! that cannot start one (`Unavailable`) is worth retrying elsewhere, a
//! provider that refuses the worker's credentials (`Unauthorized`) will
//! refuse every retry too, and a bad request or action is the caller's fault.

use std::time::Duration;

use super::SandboxId;

/// Why a sandbox call failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// No sandbox with this id is known to the provider.
    #[error("no sandbox {0}")]
    NotFound(SandboxId),
    /// The sandbox outlived its deadline and was killed.
    #[error("sandbox {0} has expired")]
    Expired(SandboxId),
    /// The sandbox went past one of its limits (memory, processes) and was
    /// killed whole.
    #[error("sandbox {id} was killed: it went past its {limit} limit")]
    LimitExceeded { id: SandboxId, limit: String },
    /// The provider cannot serve sandboxes now: a tool is missing, the
    /// display did not start, the desktop died.
    #[error("sandbox provider unavailable: {0}")]
    Unavailable(String),
    /// The provider refused the credentials it was given (a wrong or revoked
    /// API key); nothing succeeds until the configuration changes.
    #[error("sandbox provider refused the credentials: {0}")]
    Unauthorized(String),
    /// The request asks for something the provider cannot give.
    #[error("invalid sandbox request: {0}")]
    InvalidRequest(String),
    /// The action cannot be performed as given (an unknown key name).
    #[error("invalid action: {0}")]
    InvalidAction(String),
    /// A command could not be started or watched inside the sandbox.
    #[error("command failed: {0}")]
    Command(String),
    /// A command ran past its time limit and was killed.
    #[error("command timed out after {0:?}")]
    Timeout(Duration),
    /// A file could not be read or written inside the sandbox.
    #[error("file {path}: {message}")]
    File { path: String, message: String },
    /// The sandbox's display refused a request or dropped the connection.
    #[error("display error: {0}")]
    Display(String),
    /// A local I/O operation of the provider failed.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}
