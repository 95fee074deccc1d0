//! The host's side of a sandbox's spawner ([`flotilla_spawner`]): started
//! once per jailed sandbox through the jail's whole chain, it then starts
//! each command of the sandbox by fork and exec, so a command costs a fork
//! rather than a new jail, and is exactly as walled in (the spawner's walls
//! are inherited and cannot be shed). What the spawner sends back is
//! untrusted: a child's host pid is read from the pidfd it hands over.
//!
//! [`SandboxChild`] is a started command either way: through the spawner,
//! or (no jail, or no spawner binary) a process of the chain.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use flotilla_spawner::{Event, Request, Start, MAX_MESSAGE, PROTOCOL};
use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
use rustix::pipe::{pipe_with, PipeFlags};
use tokio::io::{AsyncRead, AsyncWrite, Interest};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;
use tokio::sync::oneshot;

use super::lock;

/// The spawner's program on the host: `flotilla-spawner`, built with the
/// workspace's binaries.
pub(crate) const BINARY: &str = "flotilla-spawner";
/// Where the spawner's program appears inside the jail.
pub(crate) const JAILED_PATH: &str = "/run/flotilla/spawner";

/// Where the spawner's program is: beside this executable, one directory
/// up (a test binary in `target/<profile>/deps`), or on `PATH`.
pub(crate) fn binary() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent().into_iter().chain(exe.parent().and_then(|p| p.parent()));
    let on_path = std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect::<Vec<_>>()).unwrap_or_default();
    beside.map(PathBuf::from).chain(on_path).map(|dir| dir.join(BINARY)).find(|candidate| candidate.is_file())
}

/// A pair of `SOCK_SEQPACKET` sockets: the host's end and the spawner's
/// (its standard input, blocking).
pub(crate) fn control_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None)?)
}

/// A started spawner's answer to one start.
struct Answer {
    /// Its pid on the host.
    pid: u32,
    pidfd: OwnedFd,
    exit: oneshot::Receiver<i32>,
}

#[derive(Default)]
struct Waiting {
    /// Starts not answered yet, by request id.
    starts: HashMap<u64, oneshot::Sender<Result<Answer, String>>>,
    /// Started children not ended yet, by their pid inside the sandbox.
    exits: HashMap<u32, oneshot::Sender<i32>>,
    closed: bool,
}

struct Inner {
    /// The host's end. Tokio has no sequenced-packet type; its Unix stream
    /// serves for readiness, and every packet is sent and received with
    /// `sendmsg`/`recvmsg` on it.
    socket: UnixStream,
    sending: tokio::sync::Mutex<()>,
    waiting: Mutex<Waiting>,
    next: AtomicU64,
}

/// One sandbox's spawner, shared by everything that starts commands in it.
#[derive(Clone)]
pub(crate) struct Spawner {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Spawner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spawner").finish_non_exhaustive()
    }
}

impl Spawner {
    /// Waits (until `deadline`) for the spawner on the other end of `socket`
    /// to say it is ready, then reads its answers in the background.
    pub async fn connect(socket: OwnedFd, deadline: Instant) -> io::Result<Self> {
        let socket = std::os::unix::net::UnixStream::from(socket);
        socket.set_nonblocking(true)?;
        let socket = UnixStream::from_std(socket)?;
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let ready = tokio::time::timeout_at(deadline.into(), receive(&socket, &mut buffer)).await;
        let event = match ready {
            Ok(Ok(Some((event, _)))) => event,
            Ok(Err(e)) => return Err(e),
            Ok(Ok(None)) => return Err(io::Error::other("the spawner exited before it was ready")),
            Err(_) => return Err(io::Error::other("the spawner did not say it was ready in time")),
        };
        if event != (Event::Ready { protocol: PROTOCOL }) {
            return Err(io::Error::other(format!("the spawner speaks another protocol ({event:?}, want {PROTOCOL})")));
        }
        let inner = Arc::new(Inner {
            socket,
            sending: tokio::sync::Mutex::new(()),
            waiting: Mutex::new(Waiting::default()),
            next: AtomicU64::new(1),
        });
        tokio::spawn(read_answers(Arc::clone(&inner), buffer));
        Ok(Self { inner })
    }

    /// Starts `program args` with the whole environment `env` in `cwd`,
    /// its standard streams as `streams` says.
    pub async fn spawn(
        &self,
        program: &str,
        args: &[String],
        env: Vec<(String, String)>,
        cwd: String,
        streams: Streams,
    ) -> io::Result<SandboxChild> {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let start = Request::Start(Start { id, program: program.to_owned(), args: args.to_vec(), env, cwd });
        let bytes = serde_json::to_vec(&start).map_err(io::Error::other)?;
        if bytes.len() > MAX_MESSAGE {
            return Err(io::Error::other("the command and its environment are too large"));
        }
        let ends = Ends::open(streams)?;
        let (answer, answered) = oneshot::channel();
        {
            let mut waiting = lock(&self.inner.waiting);
            if waiting.closed {
                return Err(io::Error::other("the sandbox's spawner is gone"));
            }
            waiting.starts.insert(id, answer);
        }
        let sent = self.inner.send_bytes(&bytes, &ends.childs()).await;
        // The child's ends are the spawner's now: the host keeps none open.
        let Ends { child, host_in, host_out, host_err } = ends;
        drop(child);
        if let Err(e) = sent {
            lock(&self.inner.waiting).starts.remove(&id);
            return Err(e);
        }
        let Answer { pid, pidfd, exit } = match answered.await {
            Ok(Ok(answer)) => answer,
            Ok(Err(message)) => return Err(io::Error::other(message)),
            Err(_) => return Err(io::Error::other("the sandbox's spawner is gone")),
        };
        let stdin = match host_in {
            Some(fd) => Some(Box::new(pipe::Sender::from_owned_fd(fd)?) as Box<dyn AsyncWrite + Send + Unpin>),
            None => None,
        };
        let reader = |fd: Option<OwnedFd>| -> io::Result<Option<Box<dyn AsyncRead + Send + Unpin>>> {
            Ok(match fd {
                Some(fd) => Some(Box::new(pipe::Receiver::from_owned_fd(fd)?)),
                None => None,
            })
        };
        Ok(SandboxChild {
            pid,
            stdin,
            stdout: reader(host_out)?,
            stderr: reader(host_err)?,
            exit: Exit::Spawned { pidfd, status: Some(exit), ended: None },
        })
    }
}

/// What a started command's standard input, output and error are.
#[derive(Debug)]
pub enum Streams {
    /// Pipes to the host for its output and error, and for its input when
    /// `stdin` (else its input is empty).
    Pipes { stdin: bool },
    /// All three on one terminal: the side of a pseudo-terminal a program
    /// uses, whose other side the caller keeps.
    Terminal(OwnedFd),
}

/// The two ends of a command's standard streams: the child's three
/// descriptors, sent to the spawner, and the host's pipe ends.
struct Ends {
    child: [OwnedFd; 3],
    host_in: Option<OwnedFd>,
    host_out: Option<OwnedFd>,
    host_err: Option<OwnedFd>,
}

impl Ends {
    fn open(streams: Streams) -> io::Result<Self> {
        match streams {
            Streams::Terminal(terminal) => {
                let (output, error) = (terminal.try_clone()?, terminal.try_clone()?);
                Ok(Self { child: [terminal, output, error], host_in: None, host_out: None, host_err: None })
            }
            Streams::Pipes { stdin } => {
                let (child_in, host_in) = match stdin {
                    true => {
                        let (read, write) = pipe_with(PipeFlags::CLOEXEC)?;
                        (read, Some(write))
                    }
                    false => (OwnedFd::from(std::fs::File::open("/dev/null")?), None),
                };
                let (host_out, child_out) = pipe_with(PipeFlags::CLOEXEC)?;
                let (host_err, child_err) = pipe_with(PipeFlags::CLOEXEC)?;
                Ok(Self { child: [child_in, child_out, child_err], host_in, host_out: Some(host_out), host_err: Some(host_err) })
            }
        }
    }

    fn childs(&self) -> [BorrowedFd<'_>; 3] {
        [self.child[0].as_fd(), self.child[1].as_fd(), self.child[2].as_fd()]
    }
}

impl Inner {
    /// Sends one packet, one sender at a time.
    async fn send_bytes(&self, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let _turn = self.sending.lock().await;
        let socket = &self.socket;
        socket.async_io(Interest::WRITABLE, || flotilla_spawner::send(socket, bytes, fds)).await
    }
}

/// Receives one event from the spawner; `None` once it is gone.
async fn receive(socket: &UnixStream, buffer: &mut [u8]) -> io::Result<Option<(Event, Vec<OwnedFd>)>> {
    let Some((length, fds)) = socket.async_io(Interest::READABLE, || flotilla_spawner::receive(socket, &mut *buffer)).await?
    else {
        return Ok(None);
    };
    let event = serde_json::from_slice(&buffer[..length]).map_err(io::Error::other)?;
    Ok(Some((event, fds)))
}

/// Hands each answer of the spawner to whoever waits for it, until it is
/// gone; then every waiter learns it is gone.
async fn read_answers(inner: Arc<Inner>, mut buffer: Vec<u8>) {
    while let Ok(Some((event, fds))) = receive(&inner.socket, &mut buffer).await {
        let mut waiting = lock(&inner.waiting);
        match event {
            Event::Started { id, pid } => {
                let Some(answer) = waiting.starts.remove(&id) else { continue };
                let started = fds.into_iter().next().and_then(|pidfd| Some((host_pid(&pidfd)?, pidfd)));
                let Some((host_pid, pidfd)) = started else {
                    let _ = answer.send(Err("the spawner sent no pidfd of the child".into()));
                    continue;
                };
                let (ended, exit) = oneshot::channel();
                waiting.exits.insert(pid, ended);
                // Its host pid is known: it may be waited for (and its pid
                // pass to another process once it has ended).
                let inner = Arc::clone(&inner);
                tokio::spawn(async move {
                    let watch = serde_json::to_vec(&Request::Watch { pid }).unwrap_or_default();
                    let _ = inner.send_bytes(&watch, &[]).await;
                });
                let _ = answer.send(Ok(Answer { pid: host_pid, pidfd, exit }));
            }
            Event::Refused { id, message } => {
                if let Some(answer) = waiting.starts.remove(&id) {
                    let _ = answer.send(Err(message));
                }
            }
            Event::Exited { pid, status } => {
                if let Some(ended) = waiting.exits.remove(&pid) {
                    let _ = ended.send(status);
                }
            }
            Event::Ready { .. } => {}
        }
    }
    let mut waiting = lock(&inner.waiting);
    waiting.closed = true;
    waiting.starts.clear();
    waiting.exits.clear();
}

/// The pid, as the host sees it, of the process `pidfd` refers to (its
/// `Pid:` in `/proc/self/fdinfo`); `None` when it is no pidfd.
fn host_pid(pidfd: &OwnedFd) -> Option<u32> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).ok()?;
    info.lines().find_map(|line| line.strip_prefix("Pid:")).and_then(|pid| pid.trim().parse().ok()).filter(|pid| *pid > 0)
}

/// How a started command's end is learnt.
enum Exit {
    /// From its spawner; killed through its pidfd if dropped while it runs.
    Spawned { pidfd: OwnedFd, status: Option<oneshot::Receiver<i32>>, ended: Option<ExitStatus> },
    /// A child of this process.
    Chain(tokio::process::Child),
}

/// A command started in a sandbox: its pid on the host (the leader of its
/// own process group), its pipes, and its end.
pub struct SandboxChild {
    pid: u32,
    pub stdin: Option<Box<dyn AsyncWrite + Send + Unpin>>,
    pub stdout: Option<Box<dyn AsyncRead + Send + Unpin>>,
    pub stderr: Option<Box<dyn AsyncRead + Send + Unpin>>,
    exit: Exit,
}

impl std::fmt::Debug for SandboxChild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxChild").field("pid", &self.pid).finish_non_exhaustive()
    }
}

impl SandboxChild {
    /// A child of this process started from `command` (its pipes taken).
    pub(crate) fn of_chain(mut child: tokio::process::Child) -> Self {
        Self {
            pid: child.id().unwrap_or_default(),
            stdin: child.stdin.take().map(|p| Box::new(p) as Box<dyn AsyncWrite + Send + Unpin>),
            stdout: child.stdout.take().map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
            stderr: child.stderr.take().map(|p| Box::new(p) as Box<dyn AsyncRead + Send + Unpin>),
            exit: Exit::Chain(child),
        }
    }

    /// Its pid on the host.
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Waits until it ends.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        match &mut self.exit {
            Exit::Chain(child) => child.wait().await,
            Exit::Spawned { ended: Some(status), .. } => Ok(*status),
            Exit::Spawned { status, ended, .. } => {
                let receiver = status.take().ok_or_else(|| io::Error::other("the command's end is unknown"))?;
                let status =
                    receiver.await.map(ExitStatus::from_raw).map_err(|_| io::Error::other("the sandbox's spawner is gone"))?;
                *ended = Some(status);
                Ok(status)
            }
        }
    }
}

impl Drop for SandboxChild {
    fn drop(&mut self) {
        if let Exit::Spawned { pidfd, ended: None, .. } = &self.exit {
            let _ = rustix::process::pidfd_send_signal(pidfd, rustix::process::Signal::KILL);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_spawner_outside_any_jail_starts_commands_and_reports_their_ends() {
        let Some(binary) = binary() else { panic!("{BINARY} is not built: cargo build -p flotilla-spawner") };
        let (host, inside) = control_pair().expect("a socket pair");
        let _spawner = tokio::process::Command::new(binary)
            .stdin(std::process::Stdio::from(inside))
            .kill_on_drop(true)
            .spawn()
            .expect("starts");
        let spawner = Spawner::connect(host, Instant::now() + Duration::from_secs(10)).await.expect("ready");
        let env = vec![("PATH".to_owned(), "/usr/bin:/bin".to_owned())];
        let mut child = spawner
            .spawn("sh", &["-c".into(), "echo hi; exit 4".into()], env, "/".into(), Streams::Pipes { stdin: false })
            .await
            .expect("spawned");
        let mut out = String::new();
        child.stdout.take().expect("stdout").read_to_string(&mut out).await.expect("read");
        assert_eq!(out, "hi\n");
        assert_eq!(child.wait().await.expect("ends").code(), Some(4));
    }
}
