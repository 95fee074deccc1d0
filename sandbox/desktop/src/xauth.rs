//! The X cookie of one local sandbox: 16 random bytes (MIT-MAGIC-COOKIE-1)
//! that its Xvfb demands from every client, written in the Xauthority file
//! format so the display server (`-auth`), the clients inside the sandbox
//! (`XAUTHORITY`) and worker-side tools (`x11vnc -auth`, `xwd`) all read the
//! same file. The entry is a wildcard (any address, any display number): the
//! server picks its display number only after it has read the file.
//! The file lives in the sandbox's directory, mode 0600, and is bound
//! read-only into that sandbox alone.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The authorization protocol every local display uses.
pub(crate) const PROTOCOL: &str = "MIT-MAGIC-COOKIE-1";
/// The Xauthority family that matches any address.
const FAMILY_WILD: u16 = 0xffff;

/// A display's secret.
#[derive(Clone)]
pub(crate) struct Cookie([u8; 16]);

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cookie(***)")
    }
}

impl Cookie {
    pub fn generate() -> Self {
        Self(rand::random())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Writes the Xauthority file at `path`, readable by its owner only.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path)?;
        file.write_all(&self.entry())
    }

    /// One wildcard entry: family, empty address, empty display number, protocol, cookie.
    fn entry(&self) -> Vec<u8> {
        let mut entry = Vec::with_capacity(64);
        entry.extend_from_slice(&FAMILY_WILD.to_be_bytes());
        for field in [&b""[..], b"", PROTOCOL.as_bytes(), &self.0] {
            let len = u16::try_from(field.len()).unwrap_or(u16::MAX);
            entry.extend_from_slice(&len.to_be_bytes());
            entry.extend_from_slice(field);
        }
        entry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_is_a_wildcard_magic_cookie() {
        let cookie = Cookie([7; 16]);
        let entry = cookie.entry();
        assert_eq!(&entry[..6], &[0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(&entry[6..8], &[0, 18]);
        assert_eq!(&entry[8..26], PROTOCOL.as_bytes());
        assert_eq!(&entry[26..28], &[0, 16]);
        assert_eq!(&entry[28..], &[7; 16]);
        assert!(!format!("{cookie:?}").contains('7'));
    }
}
