//! The pseudo-terminal of a process envd starts with `pty`. The host opens
//! both sides ([`rustix::pty`]: `openpt`, `unlockpt`, and the program's
//! side straight from the controlling one with `TIOCGPTPEER`, so no path
//! under `/dev/pts` is looked up), hands the program's side to the sandbox
//! as the command's standard input, output and error, and keeps the
//! controlling side: what the program prints is read from it, input is
//! written to it, and a resize sets its window size, which the kernel
//! announces to the terminal's foreground group with `SIGWINCH`.
//!
//! The command runs under util-linux `setsid --ctty --wait` inside the
//! sandbox, so the terminal is its controlling terminal (job control, `^C`
//! from typed input) and the process envd reports lives as long as the
//! command does.

use std::io;
use std::os::fd::OwnedFd;

use flotilla_e2b::envd::PtySize;
use rustix::pty::{ioctl_tiocgptpeer, openpt, unlockpt, OpenptFlags};
use rustix::termios::{tcsetwinsize, Winsize};
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

/// The program and arguments that run `program args` with the terminal on
/// their standard input as their controlling terminal.
pub(crate) fn on_terminal<'a>(program: &'a str, args: &[&'a str]) -> (&'static str, Vec<&'a str>) {
    let mut argv = vec!["--ctty", "--wait", program];
    argv.extend_from_slice(args);
    ("setsid", argv)
}

/// Why a terminal size was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum SizeError {
    #[error("a terminal needs at least one column and one row (got {cols}x{rows})")]
    Empty { cols: u32, rows: u32 },
    #[error("a terminal has at most 65535 columns and rows (got {cols}x{rows})")]
    TooLarge { cols: u32, rows: u32 },
}

/// `size` as the kernel's window size, if it is one a terminal can have.
pub(crate) fn window_size(size: PtySize) -> Result<Winsize, SizeError> {
    let PtySize { cols, rows } = size;
    if cols == 0 || rows == 0 {
        return Err(SizeError::Empty { cols, rows });
    }
    let (Ok(ws_col), Ok(ws_row)) = (u16::try_from(cols), u16::try_from(rows)) else {
        return Err(SizeError::TooLarge { cols, rows });
    };
    Ok(Winsize { ws_row, ws_col, ws_xpixel: 0, ws_ypixel: 0 })
}

/// The controlling side of one pseudo-terminal, non-blocking: read for
/// what the program prints, written (one input at a time) for what is typed.
pub(crate) struct Terminal {
    output: pipe::Receiver,
    input: tokio::sync::Mutex<pipe::Sender>,
}

impl std::fmt::Debug for Terminal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Terminal").finish_non_exhaustive()
    }
}

impl Terminal {
    /// A new pseudo-terminal of `size`: the side kept here, and the
    /// program's side to start the command with.
    pub fn open(size: Winsize) -> io::Result<(Self, OwnedFd)> {
        let flags = OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC;
        let controller = openpt(flags)?;
        unlockpt(&controller)?;
        let program = ioctl_tiocgptpeer(&controller, flags)?;
        tcsetwinsize(&controller, size)?;
        rustix::io::ioctl_fionbio(&controller, true)?;
        // Tokio's pipe ends poll any descriptor; the terminal's side is
        // not a pipe, so the pipe check is skipped.
        let writer = controller.try_clone()?;
        let output = pipe::Receiver::from_owned_fd_unchecked(controller)?;
        let input = tokio::sync::Mutex::new(pipe::Sender::from_owned_fd_unchecked(writer)?);
        Ok((Self { output, input }, program))
    }

    /// Sets the terminal's size; its foreground group gets `SIGWINCH`.
    pub fn resize(&self, size: Winsize) -> io::Result<()> {
        Ok(tcsetwinsize(&self.output, size)?)
    }

    /// Reads what the program printed into `buffer`; `0` once every
    /// program holding the terminal has closed it.
    pub async fn read(&self, buffer: &mut [u8]) -> io::Result<usize> {
        loop {
            self.output.readable().await?;
            match self.output.try_read(buffer) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                // Linux answers EIO once the last program's side is closed.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::IO.raw_os_error()) => return Ok(0),
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes all of `bytes` as typed input, after any input before it.
    pub async fn write_all(&self, bytes: &[u8]) -> io::Result<()> {
        self.input.lock().await.write_all(bytes).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_a_terminal_cannot_have_are_refused() {
        let size = window_size(PtySize { cols: 100, rows: 30 }).expect("a size");
        assert_eq!((size.ws_col, size.ws_row), (100, 30));
        assert_eq!(window_size(PtySize { cols: 0, rows: 30 }), Err(SizeError::Empty { cols: 0, rows: 30 }));
        assert_eq!(window_size(PtySize { cols: 80, rows: 70_000 }), Err(SizeError::TooLarge { cols: 80, rows: 70_000 }));
    }

    #[tokio::test]
    async fn what_is_written_to_the_programs_side_is_read_and_a_resize_is_seen_there() {
        let (terminal, program) = Terminal::open(window_size(PtySize { cols: 80, rows: 24 }).expect("a size")).expect("a pty");
        assert_eq!(rustix::termios::tcgetwinsize(&program).map(|w| (w.ws_col, w.ws_row)).ok(), Some((80, 24)));
        terminal.resize(window_size(PtySize { cols: 120, rows: 40 }).expect("a size")).expect("resized");
        assert_eq!(rustix::termios::tcgetwinsize(&program).map(|w| (w.ws_col, w.ws_row)).ok(), Some((120, 40)));
        rustix::io::write(&program, b"printed").expect("written");
        let mut buffer = [0u8; 64];
        let n = terminal.read(&mut buffer).await.expect("read");
        assert_eq!(&buffer[..n], b"printed");
        drop(program);
        assert_eq!(terminal.read(&mut buffer).await.expect("the end"), 0, "a closed program side reads as the end");
    }
}
