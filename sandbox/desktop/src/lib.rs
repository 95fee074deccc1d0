//! The local sandbox provider: a real desktop per sandbox on this machine.
//! Each sandbox is its own Xvfb display (picked free by the server), openbox,
//! and its [template](flotilla_config::Template)'s start-up apps (the
//! `desktop` template's: a maximized xterm titled `flotilla-terminal`
//! running a clean bash; `browser`: Chromium; `office`: LibreOffice); a
//! home under `root/<id>` with the template's files; one process group; every program but the display
//! server inside the sandbox's [jail](jail) (own network with egress to the
//! internet only, own user without capabilities, seccomp, a minimal view of
//! the host). A provider whose jail does not work here refuses to start: it
//! never falls back to weaker walls; `Isolation::None` (development only)
//! runs plain processes and says so at error level. Input goes through XTEST
//! and screenshots through MIT-SHM (else `GetImage`), both over one native X
//! connection that presents the display's cookie; a second connection hears
//! the display's DAMAGE reports, so a step knows when the screen settled
//! without capturing it to compare.
//!
//! Deadlines: every call checks the sandbox's deadline, and a reaper task
//! kills sandboxes past it between calls. A killed or expired sandbox leaves
//! no process and no file behind; dropping the provider kills all of its
//! sandboxes; a worker that dies, even by SIGKILL, takes its desktops with
//! it, and the next one on the host sweeps what is left (see [`record`]).

mod apps;
mod capture;
mod damage;
mod desktop;
mod display;
mod dns;
mod egress;
#[cfg(test)]
mod escape_tests;
mod freeze;
mod identity;
#[cfg(test)]
mod isolation_tests;
mod jail;
#[cfg(test)]
mod jail_fixture;
mod launch;
mod limits;
mod network;
mod owned;
mod probe;
pub mod process;
mod record;
mod seccomp;
mod spawn;
#[cfg(test)]
mod spawn_tests;
#[cfg(test)]
mod template_tests;
#[cfg(test)]
mod tests;
mod xauth;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use flotilla_types::action::Action;
use futures::future::BoxFuture;
use futures::FutureExt;
use time::OffsetDateTime;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::OnceCell;
use tokio_util::sync::CancellationToken;

use self::desktop::Processes;
use self::display::Display;
use self::jail::JailSettings;
use self::launch::Launcher;
use self::spawn::Streams;
use flotilla_sandbox::{
    keyboard, CommandOutput, GatewayBridge, PortStream, RelayProcess, Sandbox, SandboxError, SandboxId, SandboxProvider,
    SandboxRequest, SandboxStatus, Screenshot,
};

pub use self::egress::{Ipv4Net, Network};
pub use self::launch::Isolation;
pub use self::limits::SandboxLimits;
pub use self::owned::Desktops;
pub use self::record::Leftovers;
pub use flotilla_config::TERMINAL_TITLE;

/// The smallest and largest screens a local sandbox may have.
/// The longest life a sandbox may be given at once.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// How long reading or writing one file may take.
const FILE_TIMEOUT: Duration = Duration::from_secs(60);
/// The largest file `read_file` returns.
const MAX_FILE_SIZE: usize = 256 * 1024 * 1024;
/// How many ids of expired sandboxes are remembered, to answer `Expired`
/// rather than `NotFound`.
const MAX_TOMBSTONES: usize = 4096;
/// The port of the gateway forwarder inside a sandbox's own network.
const GATEWAY_PORT: u16 = 4780;

/// Settings of the local provider.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// Where sandbox directories go: `root/<id>/{home,tmp,logs}`.
    pub root: PathBuf,
    pub isolation: Isolation,
    /// Whether sandboxes reach the internet (with `Isolation::Full`).
    pub network: Network,
    /// Blocked addresses that egress reaches anyway. Not a setting: tests
    /// use one of this host's own addresses as a stand-in for the internet.
    pub egress_exceptions: Vec<Ipv4Addr>,
    /// Prefixes sandboxes never reach besides the non-public ones: the
    /// fleet's own services on public addresses.
    pub egress_deny: Vec<Ipv4Net>,
    /// What each sandbox may use of the host.
    pub limits: SandboxLimits,
    /// The resolvers sandboxes' queries go to; `None`: this host's own
    /// (`/etc/resolv.conf`). Tests name a stand-in.
    pub dns_upstream: Option<Vec<std::net::SocketAddr>>,
    /// How often the reaper looks for expired sandboxes.
    pub reap_interval: Duration,
    /// How long a killed sandbox has between TERM and KILL.
    pub kill_grace: Duration,
    /// A pause after each typed character (0 types as fast as the server takes it).
    pub key_delay: Duration,
    /// How long a desktop may take to come up.
    pub start_timeout: Duration,
    /// The templates sandboxes are made from (`None` in a request: `desktop`).
    pub templates: flotilla_config::TemplatesConfig,
}

impl LocalConfig {
    /// The configuration the isolation settings describe, with the rest at
    /// its defaults.
    pub fn from_settings(settings: &flotilla_config::IsolationConfig) -> Self {
        use flotilla_config::{SandboxIsolation, SandboxNetwork};
        let mb = |n: u64| n.saturating_mul(1 << 20);
        Self {
            isolation: match settings.isolation {
                SandboxIsolation::Full => Isolation::Full,
                SandboxIsolation::None => Isolation::None,
            },
            network: match settings.network {
                SandboxNetwork::Egress => Network::Egress,
                SandboxNetwork::Offline => Network::Offline,
            },
            limits: SandboxLimits {
                memory_bytes: mb(settings.limits.memory_mb),
                pids: settings.limits.pids,
                cpus: settings.limits.cpus,
                home_bytes: mb(settings.limits.home_mb),
                tmp_bytes: mb(settings.limits.tmp_mb),
            },
            egress_deny: settings.deny.iter().map(|(network, prefix)| Ipv4Net { network: *network, prefix: *prefix }).collect(),
            ..Self::default()
        }
    }
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            root: std::env::temp_dir().join("flotilla-sandboxes"),
            isolation: Isolation::Full,
            network: Network::Egress,
            egress_exceptions: Vec::new(),
            egress_deny: Vec::new(),
            limits: SandboxLimits::default(),
            dns_upstream: None,
            reap_interval: Duration::from_secs(1),
            kill_grace: Duration::from_millis(200),
            key_delay: Duration::ZERO,
            start_timeout: Duration::from_secs(15),
            templates: flotilla_config::TemplatesConfig::default(),
        }
    }
}

/// Runs sandboxes as local desktops. Dropping it kills them all.
pub struct LocalProvider {
    inner: Arc<Inner>,
    reaper: CancellationToken,
}

struct Inner {
    config: LocalConfig,
    sandboxes: Mutex<HashMap<SandboxId, Arc<LocalSandbox>>>,
    /// Ids of sandboxes killed for expiry or for a limit, with when and why.
    expired: Mutex<HashMap<SandboxId, (Instant, Ending)>>,
    /// How to build a jail here (probed once by building one), or why it
    /// cannot be built.
    jail: OnceCell<Result<JailSettings, String>>,
}

/// How a worker-side program (a screenshot tool, a VNC server) attaches to
/// a local sandbox's display: `DISPLAY=:<display> XAUTHORITY=<xauthority>`,
/// or `x11vnc -display :<display> -auth <xauthority>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisplayAccess {
    pub display: u32,
    /// The display's cookie file on the host (mode 0600, the worker's).
    pub xauthority: PathBuf,
}

/// One running sandbox.
struct LocalSandbox {
    id: SandboxId,
    resolution: (u32, u32),
    display: Arc<Display>,
    launcher: Launcher,
    processes: tokio::sync::Mutex<Processes>,
    deadline: Mutex<Deadline>,
    /// The gateway forwarder, once started.
    forwarder: OnceCell<()>,
}

/// Why the provider killed a sandbox on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Expired,
    /// It went past this limit.
    Limit(&'static str),
}

impl Ending {
    fn error(self, id: &SandboxId) -> SandboxError {
        match self {
            Ending::Expired => SandboxError::Expired(id.clone()),
            Ending::Limit(limit) => SandboxError::LimitExceeded { id: id.clone(), limit: limit.to_owned() },
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Deadline {
    at: Instant,
    wall: OffsetDateTime,
}

impl Deadline {
    fn after(life: Duration) -> Self {
        Self { at: Instant::now() + life, wall: OffsetDateTime::now_utc() + life }
    }
}

impl LocalSandbox {
    fn deadline(&self) -> Deadline {
        self.deadline.lock().map(|d| *d).unwrap_or_else(|poisoned| *poisoned.into_inner())
    }

    fn handle(&self) -> Sandbox {
        Sandbox { id: self.id.clone(), resolution: self.resolution, expires_at: self.deadline().wall }
    }
}

impl LocalProvider {
    /// A provider with no sandboxes yet. Inside a Tokio runtime it also
    /// starts the reaper; outside one, deadlines are checked on each call only.
    pub fn new(config: LocalConfig) -> Self {
        let inner = Arc::new(Inner {
            config,
            sandboxes: Mutex::new(HashMap::new()),
            expired: Mutex::new(HashMap::new()),
            jail: OnceCell::new(),
        });
        if inner.config.isolation == Isolation::None {
            tracing::error!(
                "local sandboxes are NOT isolated (FLOTILLA_SANDBOX_ISOLATION=none): agents share this worker's user, network \
                 and files; for development only"
            );
        }
        let reaper = CancellationToken::new();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(reap(Arc::downgrade(&inner), inner.config.reap_interval, reaper.clone()));
        }
        Self { inner, reaper }
    }

    /// A provider whose jail is checked now: with `Isolation::Full`, one
    /// that cannot isolate sandboxes on this machine is refused with the
    /// reason, so a worker refuses to start rather than run agents unjailed.
    /// First it [sweeps](Self::sweep) the desktops of workers that are gone.
    /// A template whose apps need a program this host lacks is refused
    /// first, in one line naming the template and the program.
    pub async fn start(config: LocalConfig) -> Result<Self, SandboxError> {
        config.templates.check_installed(flotilla_config::program_on_path).map_err(SandboxError::Unavailable)?;
        Self::sweep(&config.root).await.report();
        let provider = Self::new(config);
        if provider.inner.config.isolation == Isolation::Full {
            provider.inner.check_jail().await?;
        }
        Ok(provider)
    }

    /// Kills what is left under `root` of the desktops of workers that are
    /// gone, found by the [record](record) each worker keeps, and says how
    /// much there was.
    pub async fn sweep(root: &std::path::Path) -> Leftovers {
        let root = root.to_owned();
        tokio::task::spawn_blocking(move || record::sweep(&root)).await.unwrap_or_default()
    }

    /// Whether sandboxes run in their jail.
    /// Whether sandboxes of template `name` are made here.
    pub fn knows_template(&self, name: &str) -> bool {
        self.inner.config.templates.get(name).is_some()
    }

    pub fn isolated(&self) -> bool {
        self.inner.config.isolation == Isolation::Full
    }

    /// How a worker-side program attaches to sandbox `id`'s display.
    pub async fn display_access(&self, id: &SandboxId) -> Result<DisplayAccess, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        Ok(DisplayAccess { display: sandbox.launcher.display, xauthority: sandbox.launcher.xauthority.clone() })
    }

    /// The process group of a sandbox's desktop, for checks from outside.
    pub async fn process_group(&self, id: &SandboxId) -> Result<Option<u32>, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let processes = sandbox.processes.lock().await;
        Ok(processes.pgid())
    }

    /// Pauses sandbox `id`: every process stopped where it is, its memory
    /// kept; it uses no CPU until [`resume`](Self::resume). How many
    /// processes it stopped.
    pub async fn pause(&self, id: &SandboxId) -> Result<usize, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let processes = sandbox.processes.lock().await;
        processes.pause().await
    }

    /// Lets paused sandbox `id` run again.
    pub async fn resume(&self, id: &SandboxId) -> Result<(), SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let processes = sandbox.processes.lock().await;
        processes.resume().await;
        Ok(())
    }

    /// The pids of every live process of sandbox `id`.
    pub async fn process_ids(&self, id: &SandboxId) -> Result<Vec<u32>, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let processes = sandbox.processes.lock().await;
        Ok(processes.pids())
    }

    /// The memory sandbox `id`'s processes use (resident set), in bytes.
    pub async fn memory_bytes(&self, id: &SandboxId) -> Result<u64, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let processes = sandbox.processes.lock().await;
        Ok(processes.resident_bytes())
    }

    /// Where the pointer is on a sandbox's screen.
    pub async fn pointer(&self, id: &SandboxId) -> Result<(u32, u32), SandboxError> {
        let sandbox = self.inner.get(id).await?;
        blocking(move || sandbox.display.pointer()).await
    }

    /// Whether sandbox `id`'s screenshots come through shared memory; with
    /// `socket_only`, they stop doing so first.
    #[cfg(test)]
    pub(crate) async fn shared_capture(&self, id: &SandboxId, socket_only: bool) -> Result<bool, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        blocking(move || Ok(sandbox.display.shared_capture(socket_only))).await
    }

    /// Whether sandbox `id`'s X server attaches SysV segment `shmid`.
    #[cfg(test)]
    pub(crate) async fn attaches_segment(&self, id: &SandboxId, shmid: u32) -> Result<bool, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        blocking(move || sandbox.display.attaches_segment(shmid)).await
    }

    /// Sandbox `id`'s file tree as its programs see it (their root, with
    /// the sandbox's own home and `/tmp` mounted in it), as a directory
    /// handle, and its home's path there: for a caller that resolves paths
    /// beneath the handle itself, never past it (`openat2` with
    /// `RESOLVE_IN_ROOT`), as envd's directory watching does. Taken from a
    /// short-lived program started through the jail's spawner; a jailed
    /// sandbox without one has no such handle.
    pub async fn file_tree(&self, id: &SandboxId) -> Result<(std::os::fd::OwnedFd, PathBuf), SandboxError> {
        use rustix::fs::{open, Mode, OFlags};
        let sandbox = self.inner.get(id).await?;
        let launcher = &sandbox.launcher;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
        if launcher.jail.is_none() {
            return Ok((open("/", flags, Mode::empty()).map_err(std::io::Error::from)?, launcher.home.clone()));
        }
        if launcher.spawner.is_none() {
            return Err(SandboxError::Unavailable("the sandbox has no spawner to reach its files through".into()));
        }
        // `cat` waits on the input held here, so its pid stays its own
        // until the handle is open; dropping it kills it.
        let holder = launcher.spawn("cat", &[], &[], Streams::Pipes { stdin: true }).await?;
        let root = open(format!("/proc/{}/root", holder.id()).as_str(), flags, Mode::empty()).map_err(std::io::Error::from)?;
        drop(holder);
        Ok((root, launcher.home.clone()))
    }

    /// A command that runs `program args` inside sandbox `id` (its home,
    /// display, marker and isolation), for a caller that drives the process
    /// itself, as the E2B test server does with envd's processes.
    pub async fn command(&self, id: &SandboxId, program: &str, args: &[&str]) -> Result<tokio::process::Command, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        Ok(sandbox.launcher.command(program, args))
    }

    /// Starts `program args` inside sandbox `id` with `extra` over its
    /// environment, as the leader of a process group of its own, its output
    /// piped and its input a pipe with `stdin`: through the sandbox's
    /// spawner when it has one (no new jail per command), else as
    /// [`LocalProvider::command`] would.
    pub async fn spawn(
        &self,
        id: &SandboxId,
        program: &str,
        args: &[&str],
        extra: &[(String, String)],
        stdin: bool,
    ) -> Result<process::SandboxChild, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        sandbox.launcher.spawn(program, args, extra, Streams::Pipes { stdin }).await
    }

    /// Starts `program args` inside sandbox `id` as [`LocalProvider::spawn`]
    /// does, with `terminal` (the program's side of a pseudo-terminal whose
    /// other side the caller keeps) as its standard input, output and error.
    pub async fn spawn_on_terminal(
        &self,
        id: &SandboxId,
        program: &str,
        args: &[&str],
        extra: &[(String, String)],
        terminal: std::os::fd::OwnedFd,
    ) -> Result<process::SandboxChild, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        sandbox.launcher.spawn(program, args, extra, Streams::Terminal(terminal)).await
    }

    async fn create_sandbox(&self, request: &SandboxRequest) -> Result<Sandbox, SandboxError> {
        let template = check_request(request, &self.inner.config.templates)?;
        let inner = &self.inner;
        let jail = match inner.config.isolation {
            Isolation::Full => Some(inner.check_jail().await?),
            Isolation::None => None,
        };
        let id = SandboxId::parse(&format!("local-{:016x}", rand::random::<u64>()))?;
        let dir = inner.config.root.join(id.as_str());
        let started = Instant::now();
        let timeout = inner.config.start_timeout;
        let desktop = desktop::start(id.as_str(), &dir, request.resolution, jail.as_ref(), template, timeout).await?;
        let sandbox = Arc::new(LocalSandbox {
            id: id.clone(),
            resolution: desktop.display.size(),
            display: desktop.display,
            launcher: desktop.launcher,
            processes: tokio::sync::Mutex::new(desktop.processes),
            deadline: Mutex::new(Deadline::after(request.timeout)),
            forwarder: OnceCell::new(),
        });
        tracing::debug!(sandbox = %id, isolated = jail.is_some(), ms = started.elapsed().as_millis() as u64, "sandbox created");
        let handle = sandbox.handle();
        lock(&inner.sandboxes).insert(id, sandbox);
        Ok(handle)
    }

    async fn extend_sandbox(&self, id: &SandboxId, by: Duration) -> Result<OffsetDateTime, SandboxError> {
        if by > MAX_TIMEOUT {
            return Err(SandboxError::InvalidRequest(format!("a sandbox lives at most {MAX_TIMEOUT:?} at once")));
        }
        let sandbox = self.inner.get(id).await?;
        let mut deadline = lock(&sandbox.deadline);
        let wanted = Deadline::after(by);
        if wanted.at > deadline.at {
            *deadline = wanted;
        }
        Ok(deadline.wall)
    }

    async fn kill_sandbox(&self, id: &SandboxId) -> Result<(), SandboxError> {
        let removed = lock(&self.inner.sandboxes).remove(id);
        match removed {
            Some(sandbox) => {
                sandbox.processes.lock().await.stop(self.inner.config.kill_grace).await;
                tracing::debug!(sandbox = %id, "sandbox killed");
                Ok(())
            }
            None if lock(&self.inner.expired).contains_key(id) => Ok(()),
            None => Err(SandboxError::NotFound(id.clone())),
        }
    }

    async fn run_command(&self, id: &SandboxId, command: &str, timeout: Duration) -> Result<CommandOutput, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let bash = sandbox
            .launcher
            .spawn("bash", &["--noprofile", "--norc", "-c", command], &[], Streams::Pipes { stdin: false })
            .await?;
        Ok(process::run_child(bash, None, timeout, process::MAX_OUTPUT, None).await?.into_command_output())
    }

    async fn run_streaming_command(
        &self,
        id: &SandboxId,
        command: &str,
        timeout: Duration,
        lines: UnboundedSender<String>,
    ) -> Result<CommandOutput, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let bash = sandbox
            .launcher
            .spawn("bash", &["--noprofile", "--norc", "-c", command], &[], Streams::Pipes { stdin: false })
            .await?;
        Ok(process::run_child(bash, None, timeout, process::MAX_OUTPUT, Some(lines)).await?.into_command_output())
    }

    async fn read(&self, id: &SandboxId, path: &str) -> Result<Vec<u8>, SandboxError> {
        check_path(path)?;
        let sandbox = self.inner.get(id).await?;
        // Read by a process inside the sandbox, so the path means what it
        // means there and no link can reach past what the sandbox sees.
        let cat = sandbox.launcher.spawn("cat", &["--", path], &[], Streams::Pipes { stdin: false }).await?;
        let output = process::run_child(cat, None, FILE_TIMEOUT, MAX_FILE_SIZE, None).await?;
        if output.exit_code != 0 {
            return Err(file_error(path, &output.stderr));
        }
        if output.truncated {
            return Err(SandboxError::File { path: path.to_owned(), message: format!("larger than {MAX_FILE_SIZE} bytes") });
        }
        Ok(output.stdout)
    }

    async fn write(&self, id: &SandboxId, path: &str, bytes: &[u8]) -> Result<(), SandboxError> {
        check_path(path)?;
        let sandbox = self.inner.get(id).await?;
        let script = r#"mkdir -p -- "$(dirname -- "$1")" && cat > "$1""#;
        let cat = sandbox
            .launcher
            .spawn("bash", &["--noprofile", "--norc", "-c", script, "write", path], &[], Streams::Pipes { stdin: true })
            .await?;
        let output = process::run_child(cat, Some(bytes), FILE_TIMEOUT, process::MAX_OUTPUT, None).await?;
        if output.exit_code != 0 {
            return Err(file_error(path, &output.stderr));
        }
        Ok(())
    }

    /// With a jail, the sandbox's gateway socket and a `socat` inside that
    /// relays `127.0.0.1:GATEWAY_PORT` (in the sandbox's own network) to it.
    async fn bridge(&self, id: &SandboxId) -> Result<Option<GatewayBridge>, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let Some(walls) = &sandbox.launcher.jail else {
            return Ok(None);
        };
        let socket = walls.dir.join("run").join("gateway.sock");
        sandbox.forwarder.get_or_try_init(|| start_forwarder(&sandbox, &walls.dir)).await?;
        Ok(Some(GatewayBridge { socket, url: format!("http://127.0.0.1:{GATEWAY_PORT}") }))
    }

    /// A `socat` inside the sandbox (its namespaces, so its own loopback)
    /// joining its standard input and output to `127.0.0.1:port`.
    async fn relay(&self, id: &SandboxId, port: u16) -> Result<PortStream, SandboxError> {
        let sandbox = self.inner.get(id).await?;
        let target = format!("TCP:127.0.0.1:{port}");
        let mut command = sandbox.launcher.command("socat", &["STDIO", &target]);
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let child = command.spawn().map_err(|e| SandboxError::Command(format!("cannot start the port relay (socat): {e}")))?;
        let relay =
            RelayProcess::new(child).ok_or_else(|| SandboxError::Command("the port relay started without its pipes".into()))?;
        Ok(Box::new(relay))
    }

    async fn perform(&self, id: &SandboxId, action: &Action) -> Result<(), SandboxError> {
        action.validate().map_err(|e| SandboxError::InvalidAction(e.to_string()))?;
        let sandbox = self.inner.get(id).await?;
        let display = Arc::clone(&sandbox.display);
        match action.clone() {
            Action::Click { x, y, button } => blocking(move || display.click(x, y, button, 1)).await,
            Action::DoubleClick { x, y } => blocking(move || display.click(x, y, Default::default(), 2)).await,
            Action::TripleClick { x, y } => blocking(move || display.click(x, y, Default::default(), 3)).await,
            Action::MouseDown { button } => blocking(move || display.button(button, true)).await,
            Action::MouseUp { button } => blocking(move || display.button(button, false)).await,
            Action::Move { x, y } => blocking(move || display.move_to(x, y)).await,
            Action::Drag { path } => blocking(move || display.drag(&path)).await,
            Action::Scroll { x, y, scroll_x, scroll_y } => blocking(move || display.scroll(x, y, scroll_x, scroll_y)).await,
            Action::Type { text } => {
                let keys = keyboard::text(&text)?;
                let delay = self.inner.config.key_delay;
                blocking(move || display.type_keys(&keys, delay)).await
            }
            Action::Keypress { keys } => {
                let keys = keyboard::chord(&keys)?;
                blocking(move || display.chord(&keys)).await
            }
            Action::KeyDown { keys } => {
                let keys = keyboard::chord(&keys)?;
                blocking(move || display.hold(&keys, true)).await
            }
            Action::KeyUp { keys } => {
                let keys = keyboard::chord(&keys)?;
                blocking(move || display.hold(&keys, false)).await
            }
            Action::Wait { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Ok(())
            }
            // A confirmation is cleared by the pipeline, never on the screen.
            Action::Screenshot {} | Action::Confirm { .. } => Ok(()),
        }
    }
}

impl Inner {
    /// How to build a jail, once one was built here to see it works.
    async fn check_jail(&self) -> Result<JailSettings, SandboxError> {
        let result = self.jail.get_or_init(|| probe::probe_jail(&self.config)).await;
        result.clone().map_err(|reason| SandboxError::Unavailable(format!("local sandboxes cannot be isolated here: {reason}")))
    }

    /// The live sandbox `id`; one past its deadline is killed first and
    /// reported as expired, one killed for a limit says which.
    async fn get(&self, id: &SandboxId) -> Result<Arc<LocalSandbox>, SandboxError> {
        let found = lock(&self.sandboxes).get(id).cloned();
        let Some(sandbox) = found else {
            if let Some((_, ending)) = lock(&self.expired).get(id) {
                return Err(ending.error(id));
            }
            return Err(SandboxError::NotFound(id.clone()));
        };
        if sandbox.deadline().at > Instant::now() {
            return Ok(sandbox);
        }
        self.end(id, Ending::Expired).await;
        Err(SandboxError::Expired(id.clone()))
    }

    /// Kills sandbox `id` on the provider's own account and remembers why.
    async fn end(&self, id: &SandboxId, ending: Ending) {
        let removed = lock(&self.sandboxes).remove(id);
        {
            let mut expired = lock(&self.expired);
            if expired.len() >= MAX_TOMBSTONES {
                if let Some(oldest) = expired.iter().min_by_key(|(_, (at, _))| *at).map(|(id, _)| id.clone()) {
                    expired.remove(&oldest);
                }
            }
            expired.insert(id.clone(), (Instant::now(), ending));
        }
        if let Some(sandbox) = removed {
            sandbox.processes.lock().await.stop(self.config.kill_grace).await;
            match ending {
                Ending::Expired => tracing::info!(sandbox = %id, "sandbox expired and was killed"),
                Ending::Limit(limit) => tracing::warn!(sandbox = %id, limit, "sandbox went past its limit and was killed"),
            }
        }
    }

    /// The sandboxes the reaper ends now: past their deadline, or past a
    /// limit of their control group (or, without one, of what the reaper
    /// counts in their pid namespace).
    async fn endings(&self) -> Vec<(SandboxId, Ending)> {
        let now = Instant::now();
        let sandboxes: Vec<Arc<LocalSandbox>> = lock(&self.sandboxes).values().cloned().collect();
        let mut ended = Vec::new();
        for sandbox in sandboxes {
            if sandbox.deadline().at <= now {
                ended.push((sandbox.id.clone(), Ending::Expired));
                continue;
            }
            let processes = sandbox.processes.lock().await;
            let grouped = processes.cgroup().and_then(limits::Cgroup::exceeded);
            let jail = sandbox.launcher.jail.as_ref();
            if let Some(limit) = grouped.or_else(|| jail.and_then(|j| j.confinement.exceeded_without_group(j.holder))) {
                ended.push((sandbox.id.clone(), Ending::Limit(limit)));
            }
        }
        ended
    }
}

impl Drop for LocalProvider {
    fn drop(&mut self) {
        self.reaper.cancel();
        let sandboxes: Vec<_> = lock(&self.inner.sandboxes).drain().map(|(_, s)| s).collect();
        for sandbox in sandboxes {
            // A sandbox being stopped right now holds the lock; its own drop
            // finishes the job.
            if let Ok(mut processes) = sandbox.processes.try_lock() {
                processes.stop_now();
            }
        }
    }
}

/// Starts the gateway forwarder of `sandbox` and waits until it listens.
async fn start_forwarder(sandbox: &LocalSandbox, dir: &std::path::Path) -> Result<(), SandboxError> {
    let listen = format!("TCP-LISTEN:{GATEWAY_PORT},bind=127.0.0.1,fork,reuseaddr");
    let target = format!("UNIX-CONNECT:{}/gateway.sock", jail::RUN_DIR);
    let mut command = sandbox.launcher.command("socat", &[&listen, &target]);
    let mut processes = sandbox.processes.lock().await;
    let child = desktop::spawn_in_group(&mut command, processes.pgid(), &dir.join("logs").join("forwarder.log"), false)?;
    processes.adopt(child);
    drop(processes);
    let wait = format!(
        "for i in $(seq 500); do (exec 3<>/dev/tcp/127.0.0.1/{GATEWAY_PORT}) 2>/dev/null && exit 0; sleep 0.01; done; exit 1"
    );
    let check = sandbox.launcher.command("bash", &["--noprofile", "--norc", "-c", &wait]);
    let output = process::run(check, None, Duration::from_secs(10), 4096).await?;
    if output.exit_code != 0 {
        return Err(SandboxError::Unavailable("the gateway forwarder (socat) did not start in the sandbox".into()));
    }
    Ok(())
}

/// Kills expired sandboxes and those past a limit every `interval` until
/// cancelled or the provider is gone.
async fn reap(inner: Weak<Inner>, interval: Duration, cancel: CancellationToken) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let Some(inner) = inner.upgrade() else { return };
        for (id, ending) in inner.endings().await {
            inner.end(&id, ending).await;
        }
    }
}

impl SandboxProvider for LocalProvider {
    fn name(&self) -> &'static str {
        "local"
    }

    fn kind(&self) -> flotilla_types::task::SandboxProviderKind {
        flotilla_types::task::SandboxProviderKind::Local
    }

    fn create<'a>(&'a self, request: &'a SandboxRequest) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        self.create_sandbox(request).boxed()
    }

    fn connect<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Sandbox, SandboxError>> {
        async move { Ok(self.inner.get(id).await?.handle()) }.boxed()
    }

    fn status<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<SandboxStatus, SandboxError>> {
        async move {
            let sandbox = self.inner.get(id).await?;
            let alive = sandbox.processes.lock().await.alive();
            Ok(SandboxStatus { alive, expires_at: sandbox.deadline().wall })
        }
        .boxed()
    }

    fn extend<'a>(&'a self, id: &'a SandboxId, by: Duration) -> BoxFuture<'a, Result<OffsetDateTime, SandboxError>> {
        self.extend_sandbox(id, by).boxed()
    }

    fn kill<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.kill_sandbox(id).boxed()
    }

    fn run<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        self.run_command(id, command, timeout).boxed()
    }

    fn run_streaming<'a>(
        &'a self,
        id: &'a SandboxId,
        command: &'a str,
        timeout: Duration,
        lines: UnboundedSender<String>,
    ) -> BoxFuture<'a, Result<CommandOutput, SandboxError>> {
        self.run_streaming_command(id, command, timeout, lines).boxed()
    }

    fn read_file<'a>(&'a self, id: &'a SandboxId, path: &'a str) -> BoxFuture<'a, Result<Vec<u8>, SandboxError>> {
        self.read(id, path).boxed()
    }

    fn write_file<'a>(&'a self, id: &'a SandboxId, path: &'a str, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.write(id, path, bytes).boxed()
    }

    fn screenshot<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Screenshot, SandboxError>> {
        async move {
            let sandbox = self.inner.get(id).await?;
            blocking(move || sandbox.display.screenshot()).await
        }
        .boxed()
    }

    fn act<'a>(&'a self, id: &'a SandboxId, action: &'a Action) -> BoxFuture<'a, Result<(), SandboxError>> {
        self.perform(id, action).boxed()
    }

    fn screen_changed_at(&self, id: &SandboxId) -> Option<Instant> {
        let sandboxes = self.inner.sandboxes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sandboxes.get(id).and_then(|sandbox| sandbox.display.last_change())
    }

    fn live_display(&self, id: &SandboxId) -> Option<flotilla_sandbox::X11Display> {
        let sandboxes = self.inner.sandboxes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        sandboxes.get(id).map(|sandbox| flotilla_sandbox::X11Display {
            number: sandbox.launcher.display,
            xauthority: Some(sandbox.launcher.xauthority.clone()),
        })
    }

    fn gateway_bridge<'a>(&'a self, id: &'a SandboxId) -> BoxFuture<'a, Result<Option<GatewayBridge>, SandboxError>> {
        self.bridge(id).boxed()
    }

    fn opens_ports(&self) -> bool {
        true
    }

    fn open_port<'a>(&'a self, id: &'a SandboxId, port: u16) -> BoxFuture<'a, Result<PortStream, SandboxError>> {
        self.relay(id, port).boxed()
    }
}

/// The request's template, once the request is one this provider serves.
fn check_request<'t>(
    request: &SandboxRequest,
    templates: &'t flotilla_config::TemplatesConfig,
) -> Result<&'t flotilla_config::Template, SandboxError> {
    request.check(MAX_TIMEOUT)?;
    templates.resolve(request.template.as_deref()).ok_or_else(|| {
        let known: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
        SandboxError::InvalidRequest(format!(
            "unknown local template {:?}; the templates are {}",
            request.template.as_deref().unwrap_or_default(),
            known.join(", ")
        ))
    })
}

fn check_path(path: &str) -> Result<(), SandboxError> {
    if path.is_empty() || path.contains('\0') {
        return Err(SandboxError::File { path: path.to_owned(), message: "a path must be non-empty and without NUL".into() });
    }
    Ok(())
}

fn file_error(path: &str, stderr: &[u8]) -> SandboxError {
    let stderr = String::from_utf8_lossy(stderr);
    let message = stderr.lines().next().unwrap_or("failed").trim().to_owned();
    SandboxError::File { path: path.to_owned(), message }
}

/// Runs blocking X work off the async threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> Result<T, SandboxError> + Send + 'static) -> Result<T, SandboxError> {
    tokio::task::spawn_blocking(work).await.map_err(|e| SandboxError::Display(format!("display task failed: {e}")))?
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
