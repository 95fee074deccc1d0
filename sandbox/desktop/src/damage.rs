//! Knowing when a local desktop's screen last changed without reading it,
//! so a step waits for the screen to settle and then captures it once
//! instead of capturing it again and again to compare.
//!
//! The X DAMAGE extension reports drawing on the root window, its children
//! included. A [`Watch`] holds a connection of its own to the display with
//! one damage object on the root (reported when its region turns non-empty,
//! emptied again on each report) and a thread that waits on that connection
//! and stamps the time of each report. The time is read without touching
//! the X server. The thread ends when the connection does: when the watch
//! is dropped (it shuts the socket down) or the display server goes away;
//! from then on the watch knows nothing and says so ([`Watch::last_change`]
//! is `None`), and callers compare captures instead.

use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::damage::{self, ConnectionExt as _, ReportLevel};
use x11rb::protocol::Event;
use x11rb::rust_connection::{DefaultStream, RustConnection};
use x11rb::NONE;

use super::launch::x_socket;
use super::xauth::{self, Cookie};
use flotilla_sandbox::SandboxError;

/// The DAMAGE version the watch speaks (1.1: `DamageSubtract` with no region).
const DAMAGE_VERSION: (u32, u32) = (1, 1);

fn x_error(error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Display(error.to_string())
}

/// When the screen last changed, kept by the watch's thread.
struct Stamp {
    /// The time the watch began; changes are counted in nanoseconds from it.
    epoch: Instant,
    /// Nanoseconds from `epoch` to the latest report (0: none yet).
    last: AtomicU64,
    /// Whether the thread still listens.
    listening: AtomicBool,
}

/// The change reports of one display; see the module doc.
pub(crate) struct Watch {
    stamp: Arc<Stamp>,
    /// The connection's socket, to end the thread's wait on drop.
    socket: UnixStream,
}

impl Watch {
    /// Watches display `:n` of this host. `Ok(None)` when its server has no
    /// DAMAGE extension.
    pub fn start(display: u32, cookie: &Cookie) -> Result<Option<Self>, SandboxError> {
        let socket = UnixStream::connect(x_socket(display)).map_err(x_error)?;
        let shutter = socket.try_clone().map_err(x_error)?;
        let (stream, _) = DefaultStream::from_unix_stream(socket).map_err(x_error)?;
        let conn = RustConnection::connect_to_stream_with_auth_info(
            stream,
            0,
            xauth::PROTOCOL.as_bytes().to_vec(),
            cookie.bytes().to_vec(),
        )
        .map_err(x_error)?;
        if conn.extension_information(damage::X11_EXTENSION_NAME).map_err(x_error)?.is_none() {
            return Ok(None);
        }
        conn.damage_query_version(DAMAGE_VERSION.0, DAMAGE_VERSION.1).map_err(x_error)?.reply().map_err(x_error)?;
        let root = conn.setup().roots.first().ok_or_else(|| x_error("the display has no screen"))?.root;
        let object = conn.generate_id().map_err(x_error)?;
        conn.damage_create(object, root, ReportLevel::NON_EMPTY).map_err(x_error)?.check().map_err(x_error)?;
        let stamp = Arc::new(Stamp { epoch: Instant::now(), last: AtomicU64::new(0), listening: AtomicBool::new(true) });
        let listener = Arc::clone(&stamp);
        std::thread::Builder::new()
            .name(format!("damage-{display}"))
            .spawn(move || listen(&conn, object, &listener))
            .map_err(x_error)?;
        Ok(Some(Self { stamp, socket: shutter }))
    }

    /// When the screen last changed (the watch's start when it has not
    /// since); `None` once the watch no longer listens.
    pub fn last_change(&self) -> Option<Instant> {
        if !self.stamp.listening.load(Ordering::Acquire) {
            return None;
        }
        let nanos = self.stamp.last.load(Ordering::Acquire);
        Some(self.stamp.epoch + std::time::Duration::from_nanos(nanos))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // Ends the thread's wait; it closes the connection on its way out.
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }
}

/// Stamps each damage report until the connection ends.
fn listen(conn: &RustConnection, object: damage::Damage, stamp: &Stamp) {
    loop {
        match conn.wait_for_event() {
            Ok(Event::DamageNotify(_)) => {
                let nanos = u64::try_from(stamp.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1);
                stamp.last.store(nanos, Ordering::Release);
                // Empty the region so the next drawing is reported again.
                if conn.damage_subtract(object, NONE, NONE).is_err() || conn.flush().is_err() {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    stamp.listening.store(false, Ordering::Release);
}
