//! The Connect protocol's streaming envelopes, as envd speaks them for
//! server-streaming calls such as `process.Process/Start`: each message is a
//! 5-byte header (one flag byte, then the payload length as a big-endian
//! `u32`) followed by the JSON payload. Flag `0x02` marks the last envelope,
//! whose payload says whether the call failed (`{"error": {code, message}}`)
//! or not (`{}`). Compression (flag `0x01`) is never asked for, so it is
//! refused. Both the client and the test server frame with these functions.

use serde::{Deserialize, Serialize};

/// Flag of an ordinary message envelope.
pub const FLAG_MESSAGE: u8 = 0x00;
/// Flag bit of a compressed envelope.
const FLAG_COMPRESSED: u8 = 0x01;
/// Flag bit of the end-of-stream envelope.
pub const FLAG_END_STREAM: u8 = 0x02;
/// Length of an envelope's header.
const HEADER_LEN: usize = 5;
/// The largest envelope payload accepted (a data event carries at most a
/// few tens of KiB of output; this leaves ample room).
pub(crate) const MAX_FRAME: usize = 16 * 1024 * 1024;

/// The content type of a streaming call with JSON messages.
pub const STREAMING_JSON: &str = "application/connect+json";
/// The Connect protocol version header and its one value.
pub(crate) const PROTOCOL_VERSION_HEADER: &str = "connect-protocol-version";
pub(crate) const PROTOCOL_VERSION: &str = "1";
/// The header that bounds a call (and, on `Start`, the process) in milliseconds.
pub const TIMEOUT_HEADER: &str = "connect-timeout-ms";

/// One envelope read off a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A message's JSON.
    Message(Vec<u8>),
    /// The end-of-stream JSON.
    End(Vec<u8>),
}

/// Why a stream of envelopes could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("an envelope of {0} bytes is larger than allowed")]
    TooLarge(usize),
    #[error("a compressed envelope arrived though none was asked for")]
    Compressed,
    #[error("the stream ended inside an envelope")]
    Truncated,
}

/// Wraps `payload` in an envelope with `flags`.
pub fn envelope(flags: u8, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.push(flags);
    out.extend_from_slice(&length.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// Splits a byte stream into envelopes as the bytes arrive.
#[derive(Debug, Default)]
pub struct Decoder {
    buffer: Vec<u8>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The next complete envelope, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some(header) = self.buffer.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let flags = header[0];
        let length = u32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize;
        if length > MAX_FRAME {
            return Err(FrameError::TooLarge(length));
        }
        if flags & FLAG_COMPRESSED != 0 {
            return Err(FrameError::Compressed);
        }
        if self.buffer.len() < HEADER_LEN + length {
            return Ok(None);
        }
        let payload = self.buffer[HEADER_LEN..HEADER_LEN + length].to_vec();
        self.buffer.drain(..HEADER_LEN + length);
        Ok(Some(if flags & FLAG_END_STREAM != 0 { Frame::End(payload) } else { Frame::Message(payload) }))
    }

    /// Checks that the stream ended between envelopes.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buffer.is_empty() {
            Ok(())
        } else {
            Err(FrameError::Truncated)
        }
    }
}

/// A Connect error: a code string such as `deadline_exceeded` and a message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectError {
    pub code: String,
    #[serde(default)]
    pub message: String,
}

/// The payload of the end-of-stream envelope.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndOfStream {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ConnectError>,
}

/// The end-of-stream JSON, read leniently: a payload that is not JSON is an
/// `unknown` error carrying its text.
pub(crate) fn parse_end(payload: &[u8]) -> EndOfStream {
    serde_json::from_slice(payload).unwrap_or_else(|_| EndOfStream {
        error: Some(ConnectError {
            code: "unknown".into(),
            message: String::from_utf8_lossy(payload).chars().take(200).collect(),
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_round_trip_across_split_reads() {
        let mut bytes = envelope(FLAG_MESSAGE, br#"{"a":1}"#);
        bytes.extend(envelope(FLAG_END_STREAM, b"{}"));
        let mut decoder = Decoder::default();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(3) {
            decoder.push(chunk);
            while let Some(frame) = decoder.next_frame().expect("valid") {
                frames.push(frame);
            }
        }
        assert_eq!(frames, [Frame::Message(br#"{"a":1}"#.to_vec()), Frame::End(b"{}".to_vec())]);
        assert_eq!(decoder.finish(), Ok(()));
    }

    #[test]
    fn bad_envelopes_are_refused() {
        let mut decoder = Decoder::default();
        decoder.push(&[FLAG_COMPRESSED, 0, 0, 0, 1, b'x']);
        assert_eq!(decoder.next_frame(), Err(FrameError::Compressed));

        let mut decoder = Decoder::default();
        decoder.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert!(matches!(decoder.next_frame(), Err(FrameError::TooLarge(_))));

        let mut decoder = Decoder::default();
        decoder.push(&[0, 0, 0, 0, 9, b'{']);
        assert_eq!(decoder.next_frame(), Ok(None));
        assert_eq!(decoder.finish(), Err(FrameError::Truncated));
    }

    #[test]
    fn end_of_stream_errors_are_read() {
        assert_eq!(parse_end(b"{}"), EndOfStream::default());
        let failed = parse_end(br#"{"error": {"code": "deadline_exceeded", "message": "late"}, "metadata": {}}"#);
        assert_eq!(failed.error.map(|e| e.code).as_deref(), Some("deadline_exceeded"));
        assert_eq!(parse_end(b"garbage").error.map(|e| e.code).as_deref(), Some("unknown"));
    }
}
