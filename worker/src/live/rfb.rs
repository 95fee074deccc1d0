//! The viewer-to-desktop half of RFB (RFC 6143), read just far enough to
//! keep a view-only viewer's input off the desktop: the handshake and the
//! messages that ask for pictures pass, key, pointer, clipboard and
//! resize messages are dropped, and a message this filter does not know
//! ends the connection (it cannot tell where the next one starts).
//!
//! The filter is fed the bytes as they come, in chunks of any size, and
//! writes what may pass; a message split across chunks waits for its rest.
//!
//! The filter only works if it and the server agree on where each message
//! starts, so it pins the handshake it forwards to the one shape every VNC
//! server behind it reads the same way: version `RFB 003.008` or
//! `RFB 003.007`, then security type None, then `ClientInit`. Any other
//! version closes the view: x11vnc takes an unknown version (`RFB 003.005`)
//! as 3.3, which has no security choice byte, and the worker's own
//! handshake towards a remote desktop's viewers (`socket::ViewerHandshake`)
//! always reads one; a one-byte disagreement would let input through.

/// Why a viewer's stream was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RfbError {
    #[error("the viewer sent an RFB message of unknown type {0}")]
    UnknownMessage(u8),
    #[error("the viewer sent {0:?} where RFB 003.008 or 003.007 belongs")]
    BadVersion(String),
    #[error("the viewer chose security type {0}, not None (1)")]
    BadSecurity(u8),
}

/// The RFB versions a viewer may answer with: both read a security choice
/// byte and then `ClientInit`, the same on every path.
pub const VIEWER_VERSIONS: [&[u8; 12]; 2] = [b"RFB 003.008\n", b"RFB 003.007\n"];
/// RFB security type None, the only one a viewer may choose.
pub const SECURITY_NONE: u8 = 1;

/// Whether `version` (12 bytes) is one a viewer may answer with.
pub fn viewer_version_allowed(version: &[u8]) -> bool {
    VIEWER_VERSIONS.iter().any(|allowed| &allowed[..] == version)
}

/// Where in the stream the viewer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// `RFB 003.008\n` or `RFB 003.007\n`, 12 bytes.
    Version,
    /// The security type the viewer picked, 1 byte: None.
    Security,
    /// ClientInit: the shared flag, 1 byte.
    Init,
    /// Normal messages.
    Messages,
}

/// What to do with one whole unit of the stream.
enum Unit {
    Pass(usize),
    Drop(usize),
}

/// Passes a view-only viewer's stream, minus its input.
#[derive(Debug)]
pub struct ViewOnlyFilter {
    stage: Stage,
    pending: Vec<u8>,
}

impl Default for ViewOnlyFilter {
    fn default() -> Self {
        Self { stage: Stage::Version, pending: Vec::new() }
    }
}

impl ViewOnlyFilter {
    /// Takes the next `data` from the viewer and appends to `out` what may
    /// reach the desktop.
    pub fn feed(&mut self, data: &[u8], out: &mut Vec<u8>) -> Result<(), RfbError> {
        self.pending.extend_from_slice(data);
        let mut at = 0;
        while let Some(unit) = next_unit(&mut self.stage, &self.pending[at..])? {
            match unit {
                Unit::Pass(len) => {
                    out.extend_from_slice(&self.pending[at..at + len]);
                    at += len;
                }
                Unit::Drop(len) => at += len,
            }
        }
        self.pending.drain(..at);
        Ok(())
    }
}

/// The next whole unit at the start of `buf`, or `None` until more bytes come.
fn next_unit(stage: &mut Stage, buf: &[u8]) -> Result<Option<Unit>, RfbError> {
    let unit = match *stage {
        Stage::Version => {
            let Some(version) = buf.get(..12) else { return Ok(None) };
            if !viewer_version_allowed(version) {
                return Err(RfbError::BadVersion(String::from_utf8_lossy(version).into_owned()));
            }
            *stage = Stage::Security;
            Unit::Pass(12)
        }
        Stage::Security => {
            let Some(&chosen) = buf.first() else { return Ok(None) };
            if chosen != SECURITY_NONE {
                return Err(RfbError::BadSecurity(chosen));
            }
            *stage = Stage::Init;
            Unit::Pass(1)
        }
        Stage::Init => {
            if buf.is_empty() {
                return Ok(None);
            }
            *stage = Stage::Messages;
            Unit::Pass(1)
        }
        Stage::Messages => match message_len(buf)? {
            None => return Ok(None),
            Some((len, _)) if buf.len() < len => return Ok(None),
            Some((len, true)) => Unit::Pass(len),
            Some((len, false)) => Unit::Drop(len),
        },
    };
    Ok(Some(unit))
}

/// The length of the message at the start of `buf` and whether a view-only
/// viewer may send it; `None` until enough of its header is there.
fn message_len(buf: &[u8]) -> Result<Option<(usize, bool)>, RfbError> {
    let Some(&kind) = buf.first() else { return Ok(None) };
    let byte = |at: usize| buf.get(at).map(|&b| usize::from(b));
    let u16_at = |at: usize| Some(usize::from(u16::from_be_bytes([*buf.get(at)?, *buf.get(at + 1)?])));
    let u32_at = |at: usize| Some(u32::from_be_bytes([*buf.get(at)?, *buf.get(at + 1)?, *buf.get(at + 2)?, *buf.get(at + 3)?]));
    let sized = match kind {
        // SetPixelFormat, SetEncodings, FramebufferUpdateRequest.
        0 => Some((20, true)),
        2 => u16_at(2).map(|n| (4 + 4 * n, true)),
        3 => Some((10, true)),
        // KeyEvent, PointerEvent.
        4 => Some((8, false)),
        5 => Some((6, false)),
        // ClientCutText; a negative length is the extended form, whose
        // payload length is the absolute value.
        6 => u32_at(4).map(|n| (8 + (n as i32).unsigned_abs() as usize, false)),
        // EnableContinuousUpdates, Fence.
        150 => Some((10, true)),
        248 => byte(8).map(|n| (9 + n, true)),
        // xvp (shutdown, reboot), SetDesktopSize.
        250 => Some((4, false)),
        251 => byte(6).map(|n| (8 + 16 * n, false)),
        // QEMU extended key event.
        255 if byte(1) == Some(0) => Some((12, false)),
        255 if buf.len() < 2 => None,
        other => return Err(RfbError::UnknownMessage(other)),
    };
    Ok(sized)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handshake() -> Vec<u8> {
        let mut bytes = b"RFB 003.008\n".to_vec();
        bytes.extend([1, 1]);
        bytes
    }

    fn key(down: u8) -> Vec<u8> {
        vec![4, down, 0, 0, 0, 0, 0, 0x61]
    }

    fn update_request() -> Vec<u8> {
        vec![3, 1, 0, 0, 0, 0, 4, 0, 3, 0]
    }

    #[test]
    fn input_is_dropped_and_picture_requests_pass() {
        let mut stream = handshake();
        stream.extend([2, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x11]);
        stream.extend(key(1));
        stream.extend([5, 1, 0, 10, 0, 20]);
        stream.extend([6, 0, 0, 0, 0, 0, 0, 3, b'a', b'b', b'c']);
        stream.extend(update_request());
        stream.extend(key(0));
        let mut filter = ViewOnlyFilter::default();
        let mut out = Vec::new();
        filter.feed(&stream, &mut out).expect("known messages");
        let mut expected = handshake();
        expected.extend([2, 0, 0, 2, 0, 0, 0, 7, 0xff, 0xff, 0xff, 0x11]);
        expected.extend(update_request());
        assert_eq!(out, expected);
    }

    #[test]
    fn messages_split_anywhere_are_put_together() {
        let mut stream = handshake();
        for _ in 0..3 {
            stream.extend(key(1));
            stream.extend(update_request());
            stream.extend([248, 0, 0, 0, 0, 0, 0, 0, 2, 9, 9]);
        }
        let mut whole = Vec::new();
        ViewOnlyFilter::default().feed(&stream, &mut whole).expect("whole");
        for size in 1..7 {
            let mut filter = ViewOnlyFilter::default();
            let mut out = Vec::new();
            for chunk in stream.chunks(size) {
                filter.feed(chunk, &mut out).expect("chunk");
            }
            assert_eq!(out, whole, "chunks of {size}");
        }
    }

    /// Key events hidden from a filter one byte out of step with the server
    /// (the shape of the view-only bypass): each unit is, to a server,
    /// `SetEncodings` of two encodings and a `KeyEvent`; to a filter one
    /// byte ahead of it, two `FramebufferUpdateRequest`s.
    fn desync_units(keysyms: &[u32]) -> Vec<u8> {
        let mut bytes = Vec::new();
        for keysym in keysyms {
            for down in [1u8, 0] {
                bytes.extend([2, 3, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 4, down, 0, 0]);
                bytes.extend(keysym.to_be_bytes());
            }
        }
        bytes
    }

    /// The messages of a stream past the handshake as a server reads them,
    /// by type.
    fn server_reads(mut messages: &[u8]) -> Vec<u8> {
        let mut kinds = Vec::new();
        while let Ok(Some((len, _))) = message_len(messages) {
            if messages.len() < len {
                break;
            }
            kinds.push(messages[0]);
            messages = &messages[len..];
        }
        kinds
    }

    #[test]
    fn only_versions_every_server_reads_alike_pass() {
        for version in [&b"RFB 003.008\n"[..], b"RFB 003.007\n"] {
            let mut stream = version.to_vec();
            stream.extend([SECURITY_NONE, 1]);
            stream.extend(desync_units(&[0x61, 0xff0d]));
            let mut out = Vec::new();
            ViewOnlyFilter::default().feed(&stream, &mut out).expect("a 3.8 or 3.7 viewer");
            assert_eq!(out[..14], stream[..14], "the handshake passes as it is");
            let kinds = server_reads(&out[14..]);
            assert!(!kinds.is_empty() && kinds.iter().all(|&k| k == 2 || k == 3), "{kinds:?}");
        }
        // 3.3 and what x11vnc takes for 3.3 (3.5, 3.6, anything unknown), and
        // versions of other servers: refused before a byte passes.
        for version in ["RFB 003.003\n", "RFB 003.005\n", "RFB 003.006\n", "RFB 003.889\n", "RFB 004.001\n", "RFB 003.008\r"] {
            let mut stream = version.as_bytes().to_vec();
            stream.push(1);
            stream.extend(desync_units(&[0x61]));
            let mut out = Vec::new();
            let refused = ViewOnlyFilter::default().feed(&stream, &mut out);
            assert_eq!(refused, Err(RfbError::BadVersion(version.to_owned())), "{version:?}");
            assert!(out.is_empty(), "{version:?} let {out:?} through");
        }
    }

    #[test]
    fn a_security_type_other_than_none_is_refused() {
        for chosen in [0, 2, 16, 19] {
            let mut stream = b"RFB 003.008\n".to_vec();
            stream.extend([chosen, 1]);
            let mut out = Vec::new();
            assert_eq!(ViewOnlyFilter::default().feed(&stream, &mut out), Err(RfbError::BadSecurity(chosen)));
            assert_eq!(out, b"RFB 003.008\n", "nothing past the version");
        }
    }

    #[test]
    fn unknown_messages_and_versions_are_refused() {
        let mut stream = handshake();
        stream.push(77);
        assert_eq!(ViewOnlyFilter::default().feed(&stream, &mut Vec::new()), Err(RfbError::UnknownMessage(77)));
        let refused = ViewOnlyFilter::default().feed(b"GET / HTTP/1.1\r\n", &mut Vec::new());
        assert!(matches!(refused, Err(RfbError::BadVersion(_))));
    }
}
