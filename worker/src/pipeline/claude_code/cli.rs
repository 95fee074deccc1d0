//! The `claude` CLI as the pipeline runs it: the command line and its
//! environment, each line of its `stream-json` output relayed as a `block`
//! event while it runs, and the final `result` line judged.
//!
//! The CLI reports failures in two ways that both matter: a `result` line
//! with `is_error: true` (an API error keeps `subtype: "success"`, so the
//! subtype alone says nothing), and an exit without any `result` line (it
//! could not start, or could not find the session to resume).

use flotilla_types::event::EventKind;
use flotilla_types::task::StopCode;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use super::gateway_tls;
use crate::gateway::TaskToken;
use crate::pipeline::{PipelineError, TaskHandle};
use crate::sandbox::CommandOutput;

/// Where the prompt is written, relative to the sandbox's home and outside
/// the work directory; the CLI reads it on standard input, so no prompt is
/// ever parsed as a flag.
pub(super) const PROMPT_FILE: &str = ".flotilla/prompt.txt";

/// How often the CLI retries a failed model call itself.
const MODEL_RETRIES: u32 = 2;

/// The exit status of bash when it cannot find a command.
const NOT_FOUND_EXIT: i32 = 127;

/// How much of the CLI's standard error an error message quotes.
const STDERR_TAIL: usize = 800;

/// What one run of the CLI is asked to do.
pub(super) struct Invocation<'a> {
    /// The work directory, relative to the sandbox's home.
    pub work_dir: &'a str,
    pub model: Option<&'a str>,
    pub max_turns: Option<u32>,
    /// The session to continue.
    pub resume: Option<&'a str>,
    /// The id a new session takes (a UUID), so it is known before the CLI
    /// names it.
    pub session_id: Option<&'a str>,
    pub token: &'a TaskToken,
}

/// The bash command that runs the CLI headless in the work directory, with
/// the gateway's URL and the task's token as its only credentials.
pub(super) fn command(invocation: &Invocation<'_>) -> String {
    let mut env = vec![
        ("IS_SANDBOX", "1".to_owned()),
        ("ANTHROPIC_BASE_URL", invocation.token.base_url().to_owned()),
        ("ANTHROPIC_API_KEY", invocation.token.token().to_owned()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_owned()),
        ("DISABLE_AUTOUPDATER", "1".to_owned()),
        ("DISABLE_TELEMETRY", "1".to_owned()),
        ("DISABLE_ERROR_REPORTING", "1".to_owned()),
        ("CLAUDE_CODE_MAX_RETRIES", MODEL_RETRIES.to_string()),
    ];
    if let Some(model) = invocation.model {
        // The token is valid for this model alone: the CLI's helper calls use it too.
        env.push(("ANTHROPIC_SMALL_FAST_MODEL", model.to_owned()));
        env.push(("ANTHROPIC_DEFAULT_HAIKU_MODEL", model.to_owned()));
    }
    env.sort_by_key(|(name, _)| *name);
    let mut assignments: Vec<String> = env.iter().map(|(name, value)| format!("{name}={}", quoted(value))).collect();
    if invocation.token.client_credentials().is_some() {
        // The gateway's TLS listener: trust its authority, present the token's certificate.
        assignments.extend(gateway_tls::ENV.iter().map(|(name, path)| format!("{name}=\"$HOME\"/{}", quoted(path))));
    }
    let mut args = vec!["-p", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>();
    if let Some(model) = invocation.model {
        args.extend(["--model".to_owned(), quoted(model)]);
    }
    if let Some(turns) = invocation.max_turns {
        args.extend(["--max-turns".to_owned(), turns.to_string()]);
    }
    if let Some(session) = invocation.resume {
        args.extend(["--resume".to_owned(), quoted(session)]);
    } else if let Some(session) = invocation.session_id {
        args.extend(["--session-id".to_owned(), quoted(session)]);
    }
    // `exec` keeps the shell's process id: the id file names the CLI.
    format!(
        "echo $$ > \"$HOME\"/{} && cd \"$HOME\"/{} && exec env {} claude {} < \"$HOME\"/{PROMPT_FILE}",
        super::durable::PID_FILE,
        quoted(invocation.work_dir),
        assignments.join(" "),
        args.join(" ")
    )
}

/// `text` as one single-quoted bash word.
pub(super) fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// What the output stream told so far.
#[derive(Debug, Default)]
pub(super) struct CliStream {
    /// The session id, from the first line that carries one.
    pub session_id: Option<String>,
    /// The last `result` line.
    pub result: Option<Value>,
    /// How many lines became `block` events.
    pub blocks: u64,
}

impl CliStream {
    fn note(&mut self, block: &Value) {
        if self.session_id.is_none() {
            self.session_id = block.get("session_id").and_then(Value::as_str).map(str::to_owned);
        }
        if block.get("type").and_then(Value::as_str) == Some("result") {
            self.result = Some(block.clone());
        }
        self.blocks += 1;
    }
}

/// One output line as a block: a JSON object, or nothing (blank lines and
/// anything else the CLI may print are not blocks).
pub(super) fn parse_block(line: &str) -> Option<Value> {
    let value: Value = serde_json::from_str(line.trim()).ok()?;
    value.is_object().then_some(value)
}

/// Emits one `block` event per output line, in order, until the output
/// ends; returns what the lines told.
pub(super) async fn relay_blocks(
    task: &dyn TaskHandle,
    mut lines: UnboundedReceiver<String>,
) -> Result<CliStream, PipelineError> {
    let mut stream = CliStream::default();
    while let Some(line) = lines.recv().await {
        let Some(block) = parse_block(&line) else {
            if !line.trim().is_empty() {
                tracing::debug!(line = %line, "claude printed a line that is not a JSON object");
            }
            continue;
        };
        stream.note(&block);
        task.emit(EventKind::Block { block }, &[]).await?;
    }
    Ok(stream)
}

/// How the CLI ended well.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Finished {
    /// The `result` string: the agent's final answer.
    pub text: String,
    pub session_id: Option<String>,
    /// The whole `result` line.
    pub result: Value,
}

/// Reads the run's outcome from its `result` line, or, without one, from
/// its exit status and standard error.
pub(super) fn judge(stream: &CliStream, output: &CommandOutput) -> Result<Finished, PipelineError> {
    let Some(result) = &stream.result else {
        return Err(no_result(output));
    };
    if result.get("is_error").and_then(Value::as_bool).unwrap_or(true) {
        return Err(failed(result));
    }
    let session_id = result.get("session_id").and_then(Value::as_str).map(str::to_owned).or_else(|| stream.session_id.clone());
    let text = result.get("result").and_then(Value::as_str).unwrap_or_default().to_owned();
    Ok(Finished { text, session_id, result: result.clone() })
}

/// A `result` line with `is_error`: the CLI's own message, worth another
/// attempt when the model provider was overloaded or failing.
fn failed(result: &Value) -> PipelineError {
    let message = error_message(result);
    let status = result.get("api_error_status").and_then(Value::as_u64);
    match status {
        Some(429 | 500..=599) => PipelineError::Retryable(message),
        _ => PipelineError::Fatal { code: StopCode::Problem, message },
    }
}

/// The CLI's words for a failed run: its `result` text, else its `errors`,
/// else the subtype.
fn error_message(result: &Value) -> String {
    if let Some(text) = result.get("result").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
        return text.to_owned();
    }
    let errors: Vec<&str> =
        result.get("errors").and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).collect();
    if !errors.is_empty() {
        return errors.join("; ");
    }
    let subtype = result.get("subtype").and_then(Value::as_str).unwrap_or("unknown");
    format!("claude ended with an error ({subtype})")
}

fn no_result(output: &CommandOutput) -> PipelineError {
    let message = if output.exit_code == NOT_FOUND_EXIT {
        "the claude CLI is not installed in the sandbox (scripts/setup.sh installs it)".to_owned()
    } else {
        format!("claude exited with status {} without a result: {}", output.exit_code, tail(&output.stderr, STDERR_TAIL))
    };
    PipelineError::Fatal { code: StopCode::Problem, message }
}

/// The last `limit` bytes of `text` (at a character boundary), trimmed.
fn tail(text: &str, limit: usize) -> &str {
    let text = text.trim();
    let mut start = text.len().saturating_sub(limit);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn output(exit_code: i32, stderr: &str) -> CommandOutput {
        CommandOutput { exit_code, stdout: String::new(), stderr: stderr.into() }
    }

    fn stream_with(result: Value) -> CliStream {
        let mut stream = CliStream::default();
        stream.note(&json!({"type": "system", "subtype": "init", "session_id": "s-1"}));
        stream.note(&result);
        stream
    }

    #[test]
    fn words_are_quoted_for_bash() {
        assert_eq!(quoted("it's"), r"'it'\''s'");
        assert_eq!(quoted("$HOME `x`"), "'$HOME `x`'");
    }

    #[test]
    fn only_json_objects_are_blocks() {
        assert_eq!(parse_block(r#"{"type":"system"}"#), Some(json!({"type": "system"})));
        assert_eq!(parse_block("[1]"), None);
        assert_eq!(parse_block("Error: something"), None);
        assert_eq!(parse_block(""), None);
    }

    #[test]
    fn a_success_gives_the_result_text_and_session() {
        let stream = stream_with(
            json!({"type": "result", "subtype": "success", "is_error": false, "result": "Done.", "session_id": "s-1"}),
        );
        let finished = judge(&stream, &output(0, "")).expect("succeeded");
        assert_eq!((finished.text.as_str(), finished.session_id.as_deref()), ("Done.", Some("s-1")));
        assert_eq!(stream.blocks, 2);
    }

    #[test]
    fn is_error_fails_even_with_subtype_success() {
        let stream = stream_with(
            json!({"type": "result", "subtype": "success", "is_error": true, "api_error_status": 400, "result": "API Error: 400 bad"}),
        );
        let error = judge(&stream, &output(1, "")).expect_err("failed");
        assert!(matches!(&error, PipelineError::Fatal { message, .. } if message == "API Error: 400 bad"), "{error:?}");
        let overloaded =
            stream_with(json!({"type": "result", "is_error": true, "api_error_status": 529, "result": "API Error: 529"}));
        assert!(matches!(judge(&overloaded, &output(1, "")), Err(PipelineError::Retryable(_))));
    }

    #[test]
    fn max_turns_names_the_cli_errors() {
        let stream = stream_with(
            json!({"type": "result", "subtype": "error_max_turns", "is_error": true, "errors": ["Reached maximum number of turns (1)"]}),
        );
        let error = judge(&stream, &output(1, "")).expect_err("failed");
        assert!(error.to_string().contains("maximum number of turns"), "{error}");
    }

    #[test]
    fn no_result_line_quotes_stderr_or_names_a_missing_cli() {
        let error = judge(&CliStream::default(), &output(1, "No conversation found with session ID: abc\n")).expect_err("failed");
        assert!(error.to_string().contains("No conversation found"), "{error}");
        let missing = judge(&CliStream::default(), &output(127, "bash: claude: command not found")).expect_err("failed");
        assert!(missing.to_string().contains("not installed"), "{missing}");
    }

    #[test]
    fn tails_cut_at_character_boundaries() {
        assert_eq!(tail("ééé", 3), "é");
        assert_eq!(tail(" short \n", 100), "short");
    }
}
