//! envd's `process.Process/StreamInput`: a client-streaming call that
//! carries input to one process in order. Its body is Connect envelopes
//! of JSON messages (`application/connect+json`), read as they arrive: a
//! `start` naming the process by pid or tag, then `data` messages (bytes
//! for standard input or typed on the terminal, as `SendInput` takes them)
//! and `keepalive`s. The answer is Connect's streaming answer: an empty
//! message and the end of the stream once the body ended, or only an end
//! of the stream with the error that stopped it, once what is left of the
//! body is read (up to a bound, as Go's server does) (`not_found` for an
//! unknown process, `invalid_argument` for a message that is not one of
//! the three or data before the start).

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State as Shared;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use flotilla_e2b::connect::{self, Decoder, Frame, FLAG_END_STREAM, FLAG_MESSAGE};
use futures::StreamExt as _;
use serde::Deserialize;

use super::calls::{error, route, Refusal};
use super::host::Entry;
use super::host::Host;
use super::process_calls::{input_refusal, invalid, pid_of, InputMessage, Selector};
use super::stream::{stream_error, streaming_response};

/// The most of a refused request's body read before answering.
const DRAIN_LIMIT: usize = 256 * 1024;
/// The longest a refused request's body is read for before answering.
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(1);

/// One message of the stream (`process.StreamInputRequest`): exactly one
/// of its fields is set.
#[derive(Debug, Deserialize)]
struct StreamInputMessage {
    start: Option<StartMessage>,
    data: Option<DataMessage>,
    keepalive: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct StartMessage {
    process: Selector,
}

#[derive(Debug, Deserialize)]
struct DataMessage {
    #[serde(default)]
    input: InputMessage,
}

/// What one message asks.
#[derive(Debug)]
enum Step {
    Start(Selector),
    Data(InputMessage),
    Keepalive,
}

/// One message's JSON as the step it asks.
fn step(payload: &[u8]) -> Result<Step, Refusal> {
    let message: StreamInputMessage =
        serde_json::from_slice(payload).map_err(|e| invalid(format!("invalid stream input message: {e}")))?;
    match message {
        StreamInputMessage { start: Some(start), data: None, keepalive: None } => Ok(Step::Start(start.process)),
        StreamInputMessage { start: None, data: Some(data), keepalive: None } => Ok(Step::Data(data.input)),
        StreamInputMessage { start: None, data: None, keepalive: Some(_) } => Ok(Step::Keepalive),
        _ => Err(invalid("a stream input message carries exactly one of start, data and keepalive")),
    }
}

/// The stream's state: the process its start named, once it came.
struct Feed<'a> {
    sandbox: &'a Entry,
    pid: Option<u32>,
}

impl Feed<'_> {
    async fn apply(&mut self, step: Step) -> Result<(), Refusal> {
        match step {
            Step::Keepalive => Ok(()),
            Step::Start(_) if self.pid.is_some() => Err(invalid("the stream already named its process")),
            Step::Start(selector) => {
                self.pid = Some(pid_of(self.sandbox, &selector)?);
                Ok(())
            }
            Step::Data(input) => {
                let pid = self.pid.ok_or_else(|| invalid("data came before the start naming the process"))?;
                let Some((target, bytes)) = input.decode()? else { return Ok(()) };
                self.sandbox.running.write_input(pid, target.input(&bytes)).await.map_err(input_refusal)
            }
        }
    }
}

pub(super) async fn stream_input(Shared(host): Shared<Arc<Host>>, headers: HeaderMap, body: Body) -> Response {
    let sandbox = match route(&host, &headers).await {
        Ok(sandbox) => sandbox,
        Err(refused) => return refused,
    };
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok());
    if content_type != Some(connect::STREAMING_JSON) {
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "expected application/connect+json");
    }
    let mut chunks = body.into_data_stream();
    match feed(&sandbox, &mut chunks).await {
        Ok(()) => {
            let mut answer = connect::envelope(FLAG_MESSAGE, b"{}");
            answer.extend(connect::envelope(FLAG_END_STREAM, b"{}"));
            streaming_response(Body::from(answer))
        }
        Err(refused) => {
            drain(&mut chunks).await;
            let (code, message) = refused.parts();
            stream_error(code, message)
        }
    }
}

/// The body's chunks.
type Chunks = axum::body::BodyDataStream;

/// Applies every message of `chunks` in order, until they end or one fails.
async fn feed(sandbox: &Entry, chunks: &mut Chunks) -> Result<(), Refusal> {
    let mut decoder = Decoder::default();
    let mut feed = Feed { sandbox, pid: None };
    while let Some(chunk) = chunks.next().await {
        let chunk: Bytes = chunk.map_err(|e| invalid(format!("the request body broke off: {e}")))?;
        decoder.push(&chunk);
        loop {
            match decoder.next_frame().map_err(|e| invalid(e.to_string()))? {
                Some(Frame::Message(payload)) => feed.apply(step(&payload)?).await?,
                Some(Frame::End(_)) => return Ok(()),
                None => break,
            }
        }
    }
    decoder.finish().map_err(|e| invalid(e.to_string()))
}

/// Reads what is left of a refused request's body, as Go's server does
/// before it answers early (at most [`DRAIN_LIMIT`] bytes for at most
/// [`DRAIN_TIME`]), so an HTTP/1.1 client that is still sending meets an
/// answer rather than a connection closed under it.
async fn drain(chunks: &mut Chunks) {
    let read = async {
        let mut left = DRAIN_LIMIT;
        while let Some(Ok(chunk)) = chunks.next().await {
            left = left.saturating_sub(chunk.len());
            if left == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_TIME, read).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(payload: &str) -> String {
        format!("{:?}", step(payload.as_bytes()).expect_err("refused"))
    }

    #[test]
    fn each_message_is_a_start_data_or_keepalive() {
        let start = step(br#"{"start": {"process": {"pid": 42}}}"#).expect("a start");
        assert!(matches!(start, Step::Start(Selector { pid: Some(42), .. })), "{start:?}");
        let tagged = step(br#"{"start": {"process": {"tag": "shell"}}}"#).expect("a start by tag");
        assert!(matches!(&tagged, Step::Start(Selector { pid: None, tag: Some(tag) }) if tag == "shell"), "{tagged:?}");
        let data = step(br#"{"data": {"input": {"pty": "bHMK"}}}"#).expect("data");
        let Step::Data(input) = data else { panic!("data") };
        assert_eq!(input.decode().ok().flatten().map(|(_, bytes)| bytes), Some(b"ls\n".to_vec()));
        assert!(matches!(step(br#"{"keepalive": {}}"#), Ok(Step::Keepalive)));
    }

    #[test]
    fn a_message_that_is_none_or_several_or_not_json_is_invalid() {
        assert!(refused("{}").contains("invalid_argument"));
        assert!(refused(r#"{"start": {"process": {"pid": 1}}, "keepalive": {}}"#).contains("exactly one"));
        assert!(refused("not json").contains("invalid_argument"));
        assert!(refused(r#"{"start": {"process": {"pid": -1}}}"#).contains("invalid_argument"));
    }

    fn sandbox() -> Entry {
        let now = time::OffsetDateTime::now_utc();
        Entry {
            local_id: flotilla_sandbox::SandboxId::parse("local-0").expect("an id"),
            template: "desktop".into(),
            started_at: now,
            end_at: now,
            access_token: String::new(),
            metadata: Default::default(),
            env_vars: Default::default(),
            running: Default::default(),
            watchers: Default::default(),
            paused_since: None,
            on_timeout: super::super::host::OnTimeout::Kill,
        }
    }

    #[tokio::test]
    async fn a_stream_must_name_a_running_process_before_its_data() {
        let sandbox = sandbox();
        let mut feed = Feed { sandbox: &sandbox, pid: None };
        let early = feed.apply(step(br#"{"data": {"input": {"stdin": "aGk="}}}"#).expect("data")).await;
        assert!(format!("{early:?}").contains("invalid_argument") && format!("{early:?}").contains("before the start"));
        assert!(feed.apply(Step::Keepalive).await.is_ok(), "a keepalive is fine at any time");
        let unknown = feed.apply(step(br#"{"start": {"process": {"pid": 4242}}}"#).expect("a start")).await;
        assert!(format!("{unknown:?}").contains("not_found"), "{unknown:?}");
        let untagged = feed.apply(step(br#"{"start": {"process": {"tag": "none"}}}"#).expect("a start")).await;
        assert!(format!("{untagged:?}").contains("not_found"), "{untagged:?}");
    }

    #[tokio::test]
    async fn a_body_that_breaks_off_inside_an_envelope_is_invalid() {
        let sandbox = sandbox();
        let mut body = connect::envelope(FLAG_MESSAGE, br#"{"keepalive": {}}"#);
        body.extend_from_slice(&[0, 0, 0, 0, 9, b'{']);
        let fed = feed(&sandbox, &mut Body::from(body).into_data_stream()).await;
        assert!(format!("{fed:?}").contains("invalid_argument"), "{fed:?}");
        let keepalives = connect::envelope(FLAG_MESSAGE, br#"{"keepalive": {}}"#);
        assert!(feed(&sandbox, &mut Body::from(keepalives).into_data_stream()).await.is_ok());
    }
}
