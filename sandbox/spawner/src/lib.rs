//! The starter that lives inside one local sandbox's jail, and the messages
//! it exchanges with the host.
//!
//! A command of a sandbox used to pass through the whole jail chain
//! (control group, limits, `nsenter`, bubblewrap with the seccomp filter)
//! each time it started: tens of milliseconds of set-up per command. The
//! spawner is started once per sandbox through that same chain, so it has
//! every wall a command had (the sandbox's user, network, IPC, pid and
//! mount namespaces, uid 1000, no capability, no new privileges, the seccomp
//! filter, the control group and limits), and then starts each command with
//! a plain fork and exec: a child inherits all of those walls and cannot
//! shed any of them.
//!
//! The host talks to it over a `SOCK_SEQPACKET` socket on its standard
//! input, one JSON message a packet:
//!
//! - it announces itself with [`Event::Ready`] and its [`PROTOCOL`];
//! - the host sends a [`Request::Start`] with the command's standard input,
//!   output and error as three descriptors (`SCM_RIGHTS`);
//! - it answers [`Event::Started`] with a pidfd of the child (from which the
//!   host reads the child's pid as the host sees it), or [`Event::Refused`];
//! - once the host has read the pid it sends [`Request::Watch`]: only then
//!   is the child waited for (until then an ended child stays a zombie, so
//!   its pid cannot pass to another process while the host learns it);
//! - when the child ends, [`Event::Exited`] with its wait status.
//!
//! Each child leads a process group of its own. The spawner's session has
//! no controlling terminal (bubblewrap's `--new-session`), so neither has
//! any child. The host treats everything the spawner says as untrusted
//! input from the sandbox.

use std::collections::HashMap;
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};
use rustix::process::{pidfd_open, Pid, PidfdFlags};
use serde::{Deserialize, Serialize};

/// The version of the messages; the host refuses a spawner of another.
pub const PROTOCOL: u32 = 1;
/// The largest message either side sends.
pub const MAX_MESSAGE: usize = 256 * 1024;
/// The most descriptors one message carries.
pub const MAX_FDS: usize = 3;
/// A waiter thread's stack: it only waits.
const WAITER_STACK: usize = 64 * 1024;

/// One command to start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Start {
    /// The host's name for the request, echoed in the answer.
    pub id: u64,
    /// The program: a path, or a name looked up on `PATH` of `env`.
    pub program: String,
    pub args: Vec<String>,
    /// The whole environment of the command (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// The working directory.
    pub cwd: String,
}

/// What the host asks.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Request {
    Start(Start),
    /// Wait for started child `pid` and say when it ends.
    Watch {
        pid: u32,
    },
}

/// What the spawner says.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    Ready {
        protocol: u32,
    },
    /// Request `id` runs as `pid` (in the sandbox's pid namespace); the
    /// message carries a pidfd of it.
    Started {
        id: u64,
        pid: u32,
    },
    Refused {
        id: u64,
        message: String,
    },
    /// Process `pid` ended with wait status `status`.
    Exited {
        pid: u32,
        status: i32,
    },
}

/// Sends one packet of `bytes` with `fds` on `socket`.
pub fn send(socket: impl AsFd, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(std::io::Error::other("too many descriptors for one message"));
    }
    let sent = sendmsg(socket, &[IoSlice::new(bytes)], &mut control, SendFlags::NOSIGNAL)?;
    if sent != bytes.len() {
        return Err(std::io::Error::other("the message was cut"));
    }
    Ok(())
}

/// Receives one packet into `buffer` and the descriptors it carries
/// (close-on-exec); `None` when the peer closed the socket. A packet larger
/// than the buffer is an error.
pub fn receive(socket: impl AsFd, buffer: &mut [u8]) -> std::io::Result<Option<(usize, Vec<OwnedFd>)>> {
    let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS + 1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let message = recvmsg(socket, &mut [IoSliceMut::new(buffer)], &mut control, RecvFlags::CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for part in control.drain() {
        if let RecvAncillaryMessage::ScmRights(received) = part {
            fds.extend(received);
        }
    }
    if message.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC) {
        return Err(std::io::Error::other("a message was larger than allowed"));
    }
    if message.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some((message.bytes, fds)))
}

fn send_event(socket: &OwnedFd, event: &Event, fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(event).map_err(std::io::Error::other)?;
    send(socket, &bytes, fds)
}

/// Serves start requests on `control` until the host closes it.
pub fn serve(control: OwnedFd) -> std::io::Result<()> {
    let control = Arc::new(control);
    send_event(&control, &Event::Ready { protocol: PROTOCOL }, &[])?;
    let mut buffer = vec![0u8; MAX_MESSAGE];
    let mut unwatched = HashMap::new();
    while let Some((length, fds)) = receive(&*control, &mut buffer)? {
        // A request it cannot read (another version's host) ends it: the
        // host then learns at once that its spawner is gone.
        let request = serde_json::from_slice::<Request>(&buffer[..length])
            .map_err(|e| std::io::Error::other(format!("a request it cannot read: {e}")))?;
        match request {
            Request::Start(start) => match start_child(&start, fds) {
                Ok(child) => {
                    let pid = child.id();
                    unwatched.insert(pid, child);
                    started(&control, start.id, pid)?;
                }
                Err(e) => send_event(&control, &Event::Refused { id: start.id, message: e.to_string() }, &[])?,
            },
            Request::Watch { pid } => {
                if let Some(child) = unwatched.remove(&pid) {
                    watch(&control, child)?;
                }
            }
        }
    }
    Ok(())
}

/// Starts `start` with `fds` as its standard input, output and error, as the
/// leader of a process group of its own.
fn start_child(start: &Start, fds: Vec<OwnedFd>) -> std::io::Result<Child> {
    let [stdin, stdout, stderr]: [OwnedFd; 3] =
        fds.try_into().map_err(|_| std::io::Error::other("a start carries exactly three descriptors"))?;
    Command::new(&start.program)
        .args(&start.args)
        .env_clear()
        .envs(start.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&start.cwd)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .process_group(0)
        .spawn()
}

/// Says request `id` started as `pid`, with a pidfd of it.
fn started(control: &OwnedFd, id: u64, pid: u32) -> std::io::Result<()> {
    let pidfd = Pid::from_raw(pid as i32).map(|p| pidfd_open(p, PidfdFlags::empty())).transpose()?;
    let fds: Vec<BorrowedFd<'_>> = pidfd.iter().map(AsFd::as_fd).collect();
    send_event(control, &Event::Started { id, pid }, &fds)
}

/// Waits for `child` in a thread of its own, which says when it ended.
fn watch(control: &Arc<OwnedFd>, mut child: Child) -> std::io::Result<()> {
    let pid = child.id();
    let control = Arc::clone(control);
    let waiter = std::thread::Builder::new().stack_size(WAITER_STACK).spawn(move || {
        let status = child.wait().map(ExitStatusExt::into_raw).unwrap_or(-1);
        let _ = send_event(&control, &Event::Exited { pid, status }, &[]);
    });
    waiter.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    use std::io::Read;

    fn event(socket: &OwnedFd) -> (Event, Vec<OwnedFd>) {
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let (length, fds) = receive(socket, &mut buffer).expect("received").expect("not closed");
        (serde_json::from_slice(&buffer[..length]).expect("an event"), fds)
    }

    #[test]
    fn starts_a_command_with_its_pipes_and_reports_its_exit() {
        let (host, spawner) =
            socketpair(AddressFamily::UNIX, SocketType::SEQPACKET, SocketFlags::CLOEXEC, None).expect("socketpair");
        let server = std::thread::spawn(move || serve(spawner));
        assert_eq!(event(&host).0, Event::Ready { protocol: PROTOCOL });
        let (stdin_read, stdin_write) = rustix::pipe::pipe().expect("pipe");
        let (out_read, out_write) = rustix::pipe::pipe().expect("pipe");
        let (err_read, err_write) = rustix::pipe::pipe().expect("pipe");
        let start = Start {
            id: 7,
            program: "sh".into(),
            args: vec!["-c".into(), "echo \"$GREETING from $(pwd)\"; echo oops >&2; exit 3".into()],
            env: vec![("PATH".into(), "/usr/bin:/bin".into()), ("GREETING".into(), "hello".into())],
            cwd: "/".into(),
        };
        let bytes = serde_json::to_vec(&Request::Start(start.clone())).expect("json");
        send(&host, &bytes, &[stdin_read.as_fd(), out_write.as_fd(), err_write.as_fd()]).expect("sent");
        drop((stdin_read, stdin_write, out_write, err_write));
        let (started, fds) = event(&host);
        let Event::Started { id: 7, pid } = started else { panic!("not started: {started:?}") };
        assert_eq!(fds.len(), 1, "a pidfd comes with the answer");
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", std::os::fd::AsRawFd::as_raw_fd(&fds[0])))
            .expect("the pidfd's fdinfo");
        assert!(info.contains(&format!("Pid:\t{pid}\n")), "not waited for before it is watched: {info}");
        send(&host, &serde_json::to_vec(&Request::Watch { pid }).expect("json"), &[]).expect("sent");
        let (exited, _) = event(&host);
        assert_eq!(exited, Event::Exited { pid, status: 3 << 8 });
        let mut out = String::new();
        std::fs::File::from(out_read).read_to_string(&mut out).expect("stdout");
        assert_eq!(out, "hello from /\n");
        let mut err = String::new();
        std::fs::File::from(err_read).read_to_string(&mut err).expect("stderr");
        assert_eq!(err, "oops\n");
        let missing = Request::Start(Start { id: 8, program: "/nonexistent/program".into(), ..start });
        let (a, b) = rustix::pipe::pipe().expect("pipe");
        send(&host, &serde_json::to_vec(&missing).expect("json"), &[a.as_fd(), b.as_fd(), b.as_fd()]).expect("sent");
        assert!(matches!(event(&host).0, Event::Refused { id: 8, .. }));
        drop(host);
        server.join().expect("the server thread").expect("ends when the host closes");
    }
}
