//! Sandboxes: the desktops that tasks act on. One provider trait that every
//! backend implements (the local desktop, E2B and any host speaking its
//! protocol), the provider-neutral request, handle and result types, and
//! the key names all backends share. Every provider passes the same
//! behaviour suite (`suite`, behind the `testing` feature), run against the
//! real backend, and local desktops the jail's checks from inside
//! (`jail_suite`), whether a worker or a sandbox host serves them.

mod error;
pub mod http;
pub mod image;
#[cfg(any(test, feature = "testing"))]
pub mod jail_suite;
pub mod keyboard;
pub mod port;
pub mod remote;
pub mod settle;
#[cfg(any(test, feature = "testing"))]
pub mod suite;

use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use flotilla_types::action::Action;
use flotilla_types::task::SandboxProviderKind;
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;
use tokio::sync::mpsc::UnboundedSender;

pub use error::SandboxError;
pub use port::{PortStream, RelayProcess};
pub use settle::{Settle, SettledShot, SETTLE};

/// The longest sandbox id accepted.
const MAX_ID_LEN: usize = 128;

/// A sandbox's id: letters, digits, `-`, `_` and `.`, not starting with a
/// dot, so it is safe in paths and URLs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SandboxId(String);

impl SandboxId {
    pub fn parse(text: &str) -> Result<Self, SandboxError> {
        let valid = !text.is_empty()
            && text.len() <= MAX_ID_LEN
            && !text.starts_with('.')
            && text.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(SandboxError::InvalidRequest(format!(
                "a sandbox id is 1 to {MAX_ID_LEN} letters, digits, '-', '_' or '.', not starting with '.'"
            )));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SandboxId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a new sandbox should be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRequest {
    /// The provider's template (image) name; `None` for its default desktop.
    pub template: Option<String>,
    /// Screen width and height in pixels.
    pub resolution: (u32, u32),
    /// How long the sandbox lives unless extended.
    pub timeout: Duration,
}

/// The smallest and largest screens any provider starts.
const MIN_RESOLUTION: (u32, u32) = (320, 200);
const MAX_RESOLUTION: (u32, u32) = (7680, 4320);

impl SandboxRequest {
    /// Checks what every provider refuses: a screen outside 320×200 to
    /// 7680×4320, a zero or over-long lifetime, an empty template name.
    pub fn check(&self, max_timeout: Duration) -> Result<(), SandboxError> {
        let (w, h) = self.resolution;
        if !(MIN_RESOLUTION.0..=MAX_RESOLUTION.0).contains(&w) || !(MIN_RESOLUTION.1..=MAX_RESOLUTION.1).contains(&h) {
            return Err(SandboxError::InvalidRequest(format!(
                "resolution {w}x{h} is outside {}x{} to {}x{}",
                MIN_RESOLUTION.0, MIN_RESOLUTION.1, MAX_RESOLUTION.0, MAX_RESOLUTION.1
            )));
        }
        if self.timeout.is_zero() || self.timeout > max_timeout {
            return Err(SandboxError::InvalidRequest(format!("timeout must be above zero and at most {max_timeout:?}")));
        }
        if self.template.as_deref().is_some_and(str::is_empty) {
            return Err(SandboxError::InvalidRequest("a template name must not be empty".into()));
        }
        Ok(())
    }
}

impl Default for SandboxRequest {
    fn default() -> Self {
        Self { template: None, resolution: (1024, 768), timeout: Duration::from_secs(300) }
    }
}

/// A live sandbox as its provider knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub id: SandboxId,
    pub resolution: (u32, u32),
    pub expires_at: OffsetDateTime,
}

/// Whether a sandbox still runs, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SandboxStatus {
    /// The desktop answers (its display server runs).
    pub alive: bool,
    pub expires_at: OffsetDateTime,
}

/// What a command run inside a sandbox printed and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutput {
    /// The exit status; 128 + the signal number when a signal ended it.
    pub exit_code: i32,
    /// Standard output, lossily decoded as UTF-8.
    pub stdout: String,
    /// Standard error, lossily decoded as UTF-8.
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.exit_code == 0
    }
}

/// One capture of a sandbox's screen. Cheap to clone: the buffers are shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Screenshot {
    /// The screen as a PNG (8-bit RGB).
    pub png: Bytes,
    pub width: u32,
    pub height: u32,
    /// The same pixels as packed 8-bit RGB, rows top to bottom, when the
    /// capture had them anyway, so scaling for a model need not decode the PNG.
    pub rgb: Option<Bytes>,
}

/// Creates, drives and ends sandboxes of one backend. Object-safe, so a
/// worker holds `Arc<dyn SandboxProvider>` chosen by configuration.
///
/// Every call on an id checks the sandbox's deadline first: a sandbox past
/// it is killed and reported as [`SandboxError::Expired`].
pub trait SandboxProvider: Send + Sync + 'static {
    /// The provider's own name, for logs, usage and key names (`local`,
    /// `e2b`; a test fake has a name of its own).
    fn name(&self) -> &'static str;

    /// The kind of sandbox it gives, as tasks ask for one (`sandbox.provider`)
    /// and as the worker advertises it for routing.
    fn kind(&self) -> SandboxProviderKind;

    /// Starts a sandbox and returns once its desktop is ready for actions.
    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>>;

    /// Finds a running sandbox by id, for a task that continues in it.
    fn connect<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>>;

    /// Finds a running sandbox by id on `host`, the address it was recorded
    /// with (see [`SandboxProvider::host_of`]); a provider of one host (this
    /// default) looks for it on its own.
    fn connect_at<'a>(&'a self, host: Option<&'a str>, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        let _ = host;
        self.connect(id)
    }

    fn status<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>>;

    /// Keeps the sandbox alive for at least `by` from now; never shortens its
    /// life. Returns the new deadline.
    fn extend<'a>(&'a self, id: &'a SandboxId, by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>>;

    /// Pauses the sandbox: nothing in it runs and it holds no place on its
    /// host, its memory is kept, and a later [`connect`](SandboxProvider::connect)
    /// by any worker resumes it. `Ok(false)`, this default, from a provider
    /// that cannot pause (the sandbox runs on).
    fn pause<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<bool, SandboxError>> {
        let _ = id;
        async { Ok(false) }.boxed()
    }

    /// Whether [`pause`](SandboxProvider::pause) can pause this provider's
    /// sandboxes; `false` by default.
    fn can_pause(&self) -> bool {
        false
    }

    /// Ends the sandbox and everything that runs in it.
    fn kill<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>>;

    /// Runs `command` with bash in the sandbox's home directory, on its
    /// display; kills it and fails with [`SandboxError::Timeout`] after
    /// `timeout`.
    fn run<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>>;

    /// As [`run`](SandboxProvider::run), and hands each line of standard
    /// output to `lines` as the command prints it. This default, for
    /// providers that cannot stream, hands the lines over in order once the
    /// command has ended.
    fn run_streaming<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
        lines: UnboundedSender<String>,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        async move {
            let output = self.run(id, command, timeout).await?;
            for line in output.stdout.lines() {
                // A receiver that stopped listening has what it wanted.
                let _ = lines.send(line.to_owned());
            }
            Ok(output)
        }
        .boxed()
    }

    /// Reads a file as the sandbox sees it; relative paths start at its home.
    fn read_file<'a>(&'a self, id: &'a SandboxId, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>>;

    /// Writes a file as the sandbox sees it, creating parent directories.
    fn write_file<'a>(&'a self, id: &'a SandboxId, path: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>>;

    fn screenshot<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>>;

    /// Performs one action on the screen. `screenshot` is a no-op here (take
    /// one with [`SandboxProvider::screenshot`]); `wait` sleeps.
    fn act<'a>(&'a self, id: &'a SandboxId, action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>>;

    /// A capture of sandbox `id`'s screen once it has settled by `settle`,
    /// waited for where the sandbox lives (a sandbox host that sees its
    /// display's changes), in one call. `None`, this default, when the
    /// provider cannot: the caller waits with [`settle::quiet_screen`] or by
    /// comparing captures.
    fn settled_screenshot<'a>(
        &'a self,
        id: &'a SandboxId,
        settle: Settle,
    ) -> BoxFuture<'a, Result<Option<SettledShot>, SandboxError>> {
        let _ = (id, settle);
        async { Ok(None) }.boxed()
    }

    /// When sandbox `id`'s screen last changed, for a provider its display
    /// tells (a local X display's DAMAGE reports), read without a capture;
    /// `None`, this default, when it is not known: whoever waits for the
    /// screen to settle compares screenshots instead.
    fn screen_changed_at(&self, id: &SandboxId) -> Option<std::time::Instant> {
        let _ = id;
        None
    }

    /// The display a VNC server on this host can attach to for a live view
    /// of the sandbox; `None` when the provider shows it some other way or
    /// not at all.
    fn live_display(&self, id: &SandboxId) -> Option<X11Display> {
        let _ = id;
        None
    }

    /// Where sandbox `id` lives, to record with it: the host it was
    /// reached on, [`SandboxProvider::host`] for a provider of one host.
    fn host_of(&self, id: &SandboxId) -> Option<String> {
        let _ = id;
        self.host()
    }

    /// Where this provider's sandboxes live, for a worker on another machine
    /// to reach one by id: a host's API address (an E2B control plane or a
    /// sandbox host); `None`, this default, for sandboxes that live only
    /// with the process that made them.
    fn host(&self) -> Option<String> {
        None
    }

    /// The sandbox's own stream for a live view, when it serves one itself
    /// (an E2B sandbox, as the Desktop SDK streams it); `None` by default.
    fn live_stream(&self, id: &SandboxId) -> Option<std::sync::Arc<dyn remote::RemoteStream>> {
        let _ = id;
        None
    }

    /// How sandbox `id` reaches the worker's model gateway when it has no
    /// network path to it: a Unix socket the gateway listens on for this
    /// sandbox alone, and the URL the sandbox's programs call (a forwarder
    /// inside relays it to the socket). `None`, this default: the sandbox
    /// calls the gateway's own URL.
    fn gateway_bridge<'a>(&'a self, _id: &'a SandboxId) -> BoxFuture<'a, Result<Option<GatewayBridge>, SandboxError>> {
        async { Ok(None) }.boxed()
    }

    /// Whether [`open_port`](Self::open_port) can reach a port inside this
    /// provider's sandboxes; `false`, this default, for those that refuse.
    fn opens_ports(&self) -> bool {
        false
    }

    /// A byte stream to TCP `port` on sandbox `id`'s own loopback, carried
    /// by a relay inside the sandbox (see [`port`]), so a service bound
    /// there is reached without ever being exposed on the host's network.
    /// This default, for providers that cannot carry one, refuses.
    fn open_port<'a>(&'a self, id: &'a SandboxId, port: u16) -> BoxFuture<'a, Result<PortStream, SandboxError>> {
        let _ = id;
        let name = self.name();
        async move { Err(SandboxError::Unavailable(format!("the {name} provider cannot reach port {port} inside a sandbox"))) }
            .boxed()
    }
}

/// An X display on this host that a VNC server can attach to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct X11Display {
    /// The display number (`:n`).
    pub number: u32,
    /// The X authority file that lets a client in, when the display wants one.
    pub xauthority: Option<std::path::PathBuf>,
}

/// A per-sandbox way to the model gateway; see
/// [`SandboxProvider::gateway_bridge`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayBridge {
    /// Where the gateway listens, on the worker's host.
    pub socket: std::path::PathBuf,
    /// What the sandbox's programs call: `http://127.0.0.1:<port>`.
    pub url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sandbox_ids_are_checked() {
        assert!(SandboxId::parse("loc-0123abcd").is_ok());
        assert!(SandboxId::parse("i8xk2.e2b_1").is_ok());
        assert!(SandboxId::parse("").is_err());
        assert!(SandboxId::parse("../etc").is_err());
        assert!(SandboxId::parse(".hidden").is_err());
        assert!(SandboxId::parse("a/b").is_err());
        assert!(SandboxId::parse(&"x".repeat(MAX_ID_LEN + 1)).is_err());
    }
}
