//! Log lines pass through [`redact`](flotilla_types::redact::redact) on their way
//! out: a field that quotes a provider's answer, a URL with its password or
//! a header is masked in the line as it is in errors and events. The fmt
//! layer writes each event through one writer made for it; this writer keeps
//! the event's bytes and writes them, masked, when it is dropped. Colour
//! codes (on a terminal) are kept unless the line held a secret, which is
//! then written masked and without colour.

use std::borrow::Cow;
use std::io::{self, Write};

use tracing_subscriber::fmt::MakeWriter;

use flotilla_types::redact::redact;

/// Makes writers that mask secrets in what `M`'s writers would write.
pub(super) struct Redacting<M>(pub M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = MaskedEvent<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        MaskedEvent { inner: self.0.make_writer(), buffer: Vec::new() }
    }
}

/// One event's bytes, written masked to `inner` on drop.
pub(super) struct MaskedEvent<W: Write> {
    inner: W,
    buffer: Vec<u8>,
}

impl<W: Write> Write for MaskedEvent<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<W: Write> Drop for MaskedEvent<W> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.buffer);
        // A log line that cannot be written has nowhere else to go.
        let _ = self.inner.write_all(masked(&text).as_bytes());
        let _ = self.inner.flush();
    }
}

/// `text` with its secrets masked; colour codes are looked through.
fn masked(text: &str) -> Cow<'_, str> {
    if !text.contains('\x1b') {
        return redact(text);
    }
    let plain = without_colour(text);
    match redact(&plain) {
        Cow::Owned(masked) if masked != plain => Cow::Owned(masked),
        _ => Cow::Borrowed(text),
    }
}

/// `text` without ANSI escape sequences (`ESC [ … final`).
fn without_colour(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('\x40'..='\x7e').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Everything the log layer wrote.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn logged(ansi: bool, log: impl FnOnce()) -> String {
        let captured = Captured::default();
        let sink = captured.clone();
        let layer = tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(Redacting(move || sink.clone()));
        tracing::subscriber::with_default(tracing_subscriber::registry().with(layer), log);
        let bytes = captured.0.lock().expect("lock").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn secrets_in_fields_and_messages_are_masked_in_the_written_line() {
        for ansi in [false, true] {
            let line = logged(ansi, || {
                let body = r#"{"sandboxID":"sb1","envdAccessToken":"envd-secret-123"}"#;
                tracing::warn!(url = "redis://:hunter2@127.0.0.1:6379/0", body, "e2b answered with token=abc123secret");
            });
            for secret in ["envd-secret-123", "hunter2", "abc123secret"] {
                assert!(!line.contains(secret), "{secret} leaked: {line}");
            }
            assert!(line.contains("***") && line.contains("sb1") && line.contains("127.0.0.1:6379"), "{line}");
        }
    }

    #[test]
    fn lines_without_secrets_keep_their_colours() {
        let line = logged(true, || tracing::info!(task_id = "tsk_1", "task queued"));
        assert!(line.contains('\x1b') && line.contains("task queued"), "{line:?}");
        assert_eq!(without_colour("\x1b[2mkey\x1b[0m=v"), "key=v");
    }
}
