//! One X connection per local sandbox, spoken natively with x11rb: input
//! through XTEST (no xdotool process per action) and screenshots through
//! [`Capture`] (MIT-SHM, else `GetImage`), encoded to PNG in-process. Every method blocks on the X
//! socket, so async callers run them on the blocking pool. Each input method
//! ends with a round trip, so the server has applied the input when it returns.
//! Beside it, a [`Watch`] on a connection of its own says when the screen
//! last changed (X DAMAGE), read without blocking.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use flotilla_types::action::MouseButton;
use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{
    self, AtomEnum, ConnectionExt as _, MapState, Window, BUTTON_PRESS_EVENT, BUTTON_RELEASE_EVENT, KEY_PRESS_EVENT,
    KEY_RELEASE_EVENT, MOTION_NOTIFY_EVENT,
};
use x11rb::protocol::xtest::{self, ConnectionExt as _};
use x11rb::rust_connection::{DefaultStream, RustConnection};

use super::capture::Capture;
use super::damage::Watch;
use super::launch::x_socket;
use super::xauth::{self, Cookie};

use flotilla_sandbox::keyboard::Keysym;
use flotilla_sandbox::{SandboxError, Screenshot};

/// How long after its release a key typed twice in a row is pressed again.
const REPEATED_KEY_DELAY_MS: u32 = 2;

/// The keysym of the left Shift key.
const SHIFT_L: u32 = 0xffe1;
/// The most wheel clicks one scroll may ask for on each axis.
const MAX_SCROLL_CLICKS: u32 = 1_000;

/// An open connection to a sandbox's display.
pub(crate) struct Display {
    conn: RustConnection,
    root: Window,
    width: u16,
    height: u16,
    capture: Mutex<Capture>,
    /// When the screen last changed; `None` when the server cannot say.
    changes: Option<Watch>,
    keyboard: Mutex<Keyboard>,
    client_list: xproto::Atom,
}

fn x_error(error: impl std::fmt::Display) -> SandboxError {
    SandboxError::Display(error.to_string())
}

impl Display {
    /// Connects to display `:n` of this host with its cookie and checks it
    /// has XTEST.
    pub fn connect(display: u32, cookie: &Cookie) -> Result<Self, SandboxError> {
        let stream = std::os::unix::net::UnixStream::connect(x_socket(display)).map_err(x_error)?;
        let (stream, _) = DefaultStream::from_unix_stream(stream).map_err(x_error)?;
        let screen_num = 0;
        let conn = RustConnection::connect_to_stream_with_auth_info(
            stream,
            screen_num,
            xauth::PROTOCOL.as_bytes().to_vec(),
            cookie.bytes().to_vec(),
        )
        .map_err(x_error)?;
        if conn.extension_information(xtest::X11_EXTENSION_NAME).map_err(x_error)?.is_none() {
            return Err(SandboxError::Unavailable("the display has no XTEST extension".into()));
        }
        let setup = conn.setup();
        let screen = setup.roots.get(screen_num).ok_or_else(|| x_error("the display has no screen"))?;
        let capture = Capture::new(&conn, screen)?;
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        let keyboard = Keyboard::load(&conn)?;
        let client_list = intern(&conn, "_NET_CLIENT_LIST")?;
        let changes = Watch::start(display, cookie).unwrap_or_else(|e| {
            tracing::debug!(error = %e, "no damage reports; settling compares screenshots");
            None
        });
        Ok(Self { conn, root, width, height, capture: Mutex::new(capture), changes, keyboard: Mutex::new(keyboard), client_list })
    }

    /// The screen's size in pixels.
    pub fn size(&self) -> (u32, u32) {
        (u32::from(self.width), u32::from(self.height))
    }

    /// The whole screen as an RGB PNG.
    pub fn screenshot(&self) -> Result<Screenshot, SandboxError> {
        let mut capture = self.capture.lock().map_err(|_| x_error("capture state poisoned"))?;
        capture.take(&self.conn, self.root)
    }

    /// When the screen last changed, as the server reports it; `None` when
    /// it does not.
    pub fn last_change(&self) -> Option<std::time::Instant> {
        self.changes.as_ref().and_then(Watch::last_change)
    }

    /// Whether screenshots go through shared memory; with `socket_only`,
    /// they stop doing so first.
    #[cfg(test)]
    pub fn shared_capture(&self, socket_only: bool) -> bool {
        self.capture.lock().is_ok_and(|mut capture| {
            if socket_only {
                capture.socket_only();
            }
            capture.shared()
        })
    }

    /// Whether the server attaches SysV shared-memory segment `shmid` for
    /// this client, as MIT-SHM's `ShmAttach` asks it to.
    #[cfg(test)]
    pub fn attaches_segment(&self, shmid: u32) -> Result<bool, SandboxError> {
        use x11rb::protocol::shm::ConnectionExt as _;
        let seg = self.conn.generate_id().map_err(x_error)?;
        let attached = self.conn.shm_attach(seg, shmid, false).map_err(x_error)?.check().is_ok();
        if attached {
            let _ = self.conn.shm_detach(seg);
        }
        Ok(attached)
    }

    /// Where the pointer is.
    pub fn pointer(&self) -> Result<(u32, u32), SandboxError> {
        let reply = self.conn.query_pointer(self.root).map_err(x_error)?.reply().map_err(x_error)?;
        Ok((u32::try_from(reply.root_x).unwrap_or(0), u32::try_from(reply.root_y).unwrap_or(0)))
    }

    pub fn move_to(&self, x: u32, y: u32) -> Result<(), SandboxError> {
        self.motion(x, y)?;
        self.sync()
    }

    /// Moves to (x, y) and clicks `count` times.
    pub fn click(&self, x: u32, y: u32, button: MouseButton, count: u32) -> Result<(), SandboxError> {
        let detail = button_number(button);
        self.motion(x, y)?;
        for _ in 0..count {
            self.fake(BUTTON_PRESS_EVENT, detail, 0, 0)?;
            self.fake(BUTTON_RELEASE_EVENT, detail, 0, 0)?;
        }
        self.sync()
    }

    /// Presses (`down`) or releases a button where the pointer is.
    pub fn button(&self, button: MouseButton, down: bool) -> Result<(), SandboxError> {
        let kind = if down { BUTTON_PRESS_EVENT } else { BUTTON_RELEASE_EVENT };
        self.fake(kind, button_number(button), 0, 0)?;
        self.sync()
    }

    /// Presses the left button at the first point, moves through the
    /// others, and releases it at the last.
    pub fn drag(&self, path: &[[u32; 2]]) -> Result<(), SandboxError> {
        let (Some([x0, y0]), Some(rest)) = (path.first(), path.get(1..)) else {
            return Err(SandboxError::InvalidAction("a drag needs at least 2 points".into()));
        };
        for [x, y] in path {
            self.check_point(*x, *y)?;
        }
        self.motion(*x0, *y0)?;
        self.fake(BUTTON_PRESS_EVENT, 1, 0, 0)?;
        self.sync()?;
        for [x, y] in rest {
            self.motion(*x, *y)?;
            self.sync()?;
        }
        self.fake(BUTTON_RELEASE_EVENT, 1, 0, 0)?;
        self.sync()
    }

    /// Moves to (x, y) and turns the wheel: positive `dy` scrolls down,
    /// positive `dx` right, one wheel click per unit.
    pub fn scroll(&self, x: u32, y: u32, dx: i32, dy: i32) -> Result<(), SandboxError> {
        if dx.unsigned_abs() > MAX_SCROLL_CLICKS || dy.unsigned_abs() > MAX_SCROLL_CLICKS {
            return Err(SandboxError::InvalidAction(format!("a scroll is at most {MAX_SCROLL_CLICKS} wheel clicks each way")));
        }
        self.motion(x, y)?;
        let vertical = if dy > 0 { 5 } else { 4 };
        let horizontal = if dx > 0 { 7 } else { 6 };
        for (button, clicks) in [(vertical, dy.unsigned_abs()), (horizontal, dx.unsigned_abs())] {
            for _ in 0..clicks {
                self.fake(BUTTON_PRESS_EVENT, button, 0, 0)?;
                self.fake(BUTTON_RELEASE_EVENT, button, 0, 0)?;
            }
        }
        self.sync()
    }

    /// Types each keysym as one key stroke, with Shift where the keymap
    /// needs it, waiting `delay` after each.
    pub fn type_keys(&self, keys: &[Keysym], delay: Duration) -> Result<(), SandboxError> {
        let mut previous = None;
        for key in keys {
            let (code, shift) = self.keycode(key)?;
            if shift {
                self.fake(KEY_PRESS_EVENT, self.shift_code()?, 0, 0)?;
            }
            // A key pressed again at once gets a later server time than its
            // release: toolkits (LibreOffice's among them) take a release and
            // a press of one key at the same time for auto-repeat and drop
            // the letter ("apples" typed as "aples").
            let after_ms = if previous == Some(code) { REPEATED_KEY_DELAY_MS } else { 0 };
            self.fake_after(KEY_PRESS_EVENT, code, after_ms)?;
            previous = Some(code);
            self.fake(KEY_RELEASE_EVENT, code, 0, 0)?;
            if shift {
                self.fake(KEY_RELEASE_EVENT, self.shift_code()?, 0, 0)?;
            }
            self.sync()?;
            if !delay.is_zero() {
                std::thread::sleep(delay);
            }
        }
        Ok(())
    }

    /// Presses the keys in order and releases them in reverse: a chord.
    pub fn chord(&self, keys: &[Keysym]) -> Result<(), SandboxError> {
        let codes = self.chord_codes(keys)?;
        for code in &codes {
            self.fake(KEY_PRESS_EVENT, *code, 0, 0)?;
        }
        for code in codes.iter().rev() {
            self.fake(KEY_RELEASE_EVENT, *code, 0, 0)?;
        }
        self.sync()
    }

    /// Presses the keys in order and keeps them down (`down`), or releases
    /// them in reverse order.
    pub fn hold(&self, keys: &[Keysym], down: bool) -> Result<(), SandboxError> {
        let codes = self.chord_codes(keys)?;
        if down {
            for code in &codes {
                self.fake(KEY_PRESS_EVENT, *code, 0, 0)?;
            }
        } else {
            for code in codes.iter().rev() {
                self.fake(KEY_RELEASE_EVENT, *code, 0, 0)?;
            }
        }
        self.sync()
    }

    /// The key codes of a chord, with Shift added where a key needs it.
    fn chord_codes(&self, keys: &[Keysym]) -> Result<Vec<u8>, SandboxError> {
        let mut codes = Vec::with_capacity(keys.len() + 1);
        for key in keys {
            let (code, shift) = self.keycode(key)?;
            let shift_code = self.shift_code()?;
            if shift && !codes.contains(&shift_code) {
                codes.push(shift_code);
            }
            codes.push(code);
        }
        Ok(codes)
    }

    /// A mapped top-level window the window manager manages whose
    /// `WM_CLASS` instance or class is `class` (any case).
    pub fn find_class(&self, class: &str) -> Result<Option<Window>, SandboxError> {
        self.find_managed(|window| self.has_class(window, class))
    }

    fn find_managed(&self, matches: impl Fn(Window) -> Result<bool, SandboxError>) -> Result<Option<Window>, SandboxError> {
        let list = self
            .conn
            .get_property(false, self.root, self.client_list, AtomEnum::WINDOW, 0, 1024)
            .map_err(x_error)?
            .reply()
            .map_err(x_error)?;
        let Some(windows) = list.value32() else {
            return Ok(None);
        };
        for window in windows {
            if !matches(window)? {
                continue;
            }
            let Ok(attributes) = self.conn.get_window_attributes(window).map_err(x_error)?.reply() else {
                continue;
            };
            if attributes.map_state == MapState::VIEWABLE {
                return Ok(Some(window));
            }
        }
        Ok(None)
    }

    /// Asks the window manager to activate `window` (raise and focus it), as
    /// a pager would (`_NET_ACTIVE_WINDOW`), and waits for the server to
    /// take the request.
    pub fn activate(&self, window: Window) -> Result<(), SandboxError> {
        let active = intern(&self.conn, "_NET_ACTIVE_WINDOW")?;
        // Source 2: a pager, which window managers obey without focus-stealing checks.
        let event = xproto::ClientMessageEvent::new(32, window, active, [2u32, 0, 0, 0, 0]);
        let mask = xproto::EventMask::SUBSTRUCTURE_REDIRECT | xproto::EventMask::SUBSTRUCTURE_NOTIFY;
        self.conn.send_event(false, self.root, mask, event).map_err(x_error)?;
        self.sync()
    }

    /// Whether `window`'s `WM_CLASS` names `class` as its instance or class.
    fn has_class(&self, window: Window, class: &str) -> Result<bool, SandboxError> {
        let reply = self
            .conn
            .get_property(false, window, AtomEnum::WM_CLASS, AtomEnum::STRING, 0, 256)
            .map_err(x_error)?
            .reply()
            .map_err(x_error)?;
        Ok(reply.value.split(|b| *b == 0).any(|part| part.eq_ignore_ascii_case(class.as_bytes())))
    }

    fn check_point(&self, x: u32, y: u32) -> Result<(), SandboxError> {
        if x >= u32::from(self.width) || y >= u32::from(self.height) {
            return Err(SandboxError::InvalidAction(format!(
                "point ({x}, {y}) is outside the {}x{} screen",
                self.width, self.height
            )));
        }
        Ok(())
    }

    fn motion(&self, x: u32, y: u32) -> Result<(), SandboxError> {
        self.check_point(x, y)?;
        // Inside the screen, so both fit an i16.
        let (x, y) = (i16::try_from(x).unwrap_or(i16::MAX), i16::try_from(y).unwrap_or(i16::MAX));
        self.fake(MOTION_NOTIFY_EVENT, 0, x, y)
    }

    /// A key event the server handles `after_ms` milliseconds from now
    /// (XTEST's delay), so that it carries a later time.
    fn fake_after(&self, kind: u8, detail: u8, after_ms: u32) -> Result<(), SandboxError> {
        self.conn.xtest_fake_input(kind, detail, after_ms, self.root, 0, 0, 0).map_err(x_error)?;
        Ok(())
    }

    fn fake(&self, kind: u8, detail: u8, x: i16, y: i16) -> Result<(), SandboxError> {
        self.conn.xtest_fake_input(kind, detail, x11rb::CURRENT_TIME, self.root, x, y, 0).map_err(x_error)?;
        Ok(())
    }

    /// One round trip: the server has handled every request sent before.
    fn sync(&self) -> Result<(), SandboxError> {
        self.conn.get_input_focus().map_err(x_error)?.reply().map_err(x_error)?;
        Ok(())
    }

    fn keycode(&self, key: &Keysym) -> Result<(u8, bool), SandboxError> {
        let mut keyboard = self.keyboard.lock().map_err(|_| x_error("keyboard state poisoned"))?;
        keyboard.resolve(&self.conn, key)
    }

    fn shift_code(&self) -> Result<u8, SandboxError> {
        let keyboard = self.keyboard.lock().map_err(|_| x_error("keyboard state poisoned"))?;
        keyboard.codes.get(&SHIFT_L).map(|(code, _)| *code).ok_or_else(|| x_error("the keymap has no Shift key"))
    }
}

/// The X button number of a mouse button.
fn button_number(button: MouseButton) -> u8 {
    match button {
        MouseButton::Left => 1,
        MouseButton::Middle => 2,
        MouseButton::Right => 3,
    }
}

fn intern(conn: &RustConnection, name: &str) -> Result<xproto::Atom, SandboxError> {
    Ok(conn.intern_atom(false, name.as_bytes()).map_err(x_error)?.reply().map_err(x_error)?.atom)
}

/// Which keycode (and whether Shift) produces each keysym, read once from the
/// server's core keymap; keysyms it lacks are bound on the fly to one spare
/// keycode, as xdotool does.
struct Keyboard {
    keysyms_per_keycode: u8,
    codes: HashMap<u32, (u8, bool)>,
    scratch: Option<u8>,
}

impl Keyboard {
    fn load(conn: &RustConnection) -> Result<Self, SandboxError> {
        let setup = conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let count = max.saturating_sub(min).saturating_add(1);
        let map = conn.get_keyboard_mapping(min, count).map_err(x_error)?.reply().map_err(x_error)?;
        let per = usize::from(map.keysyms_per_keycode.max(1));
        let mut codes = HashMap::new();
        let mut scratch = None;
        // Level 0 (no Shift) wins over level 1 wherever a keysym has both.
        for level in 0..per.min(2) {
            for (index, syms) in map.keysyms.chunks(per).enumerate() {
                let code = min.saturating_add(u8::try_from(index).unwrap_or(u8::MAX));
                if level == 0 && syms.iter().all(|s| *s == 0) {
                    scratch = Some(code);
                }
                if let Some(&sym) = syms.get(level).filter(|s| **s != 0) {
                    codes.entry(sym).or_insert((code, level == 1));
                }
            }
        }
        Ok(Self { keysyms_per_keycode: map.keysyms_per_keycode, codes, scratch })
    }

    fn resolve(&mut self, conn: &RustConnection, key: &Keysym) -> Result<(u8, bool), SandboxError> {
        if let Some(found) = self.codes.get(&key.value) {
            return Ok(*found);
        }
        let scratch = self
            .scratch
            .ok_or_else(|| SandboxError::InvalidAction(format!("the keymap has no key for {} and no spare keycode", key.name)))?;
        let syms = vec![key.value; usize::from(self.keysyms_per_keycode.max(1))];
        conn.change_keyboard_mapping(1, scratch, self.keysyms_per_keycode.max(1), &syms)
            .map_err(x_error)?
            .check()
            .map_err(x_error)?;
        self.codes.retain(|_, (code, _)| *code != scratch);
        self.codes.insert(key.value, (scratch, false));
        Ok((scratch, false))
    }
}
