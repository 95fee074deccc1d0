//! Reading one Responses API answer into a [`Turn`]: reasoning summaries,
//! assistant text, computer calls with their actions and pending safety
//! checks, and token usage. Output item types this client does not use are
//! skipped; anything it uses that does not parse is a malformed answer
//! naming the field.

use super::actions::model_actions;
use super::json::At;
use super::NAVIGATE;
use crate::model::browser::BrowserCall;
use crate::model::{ask_human_question, ModelAction, ModelError, SafetyCheck, ToolCall, Turn, Usage, ASK_HUMAN};

/// One answer, read.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The response id the next turn continues from.
    pub id: String,
    pub turn: Turn,
    /// Which call each pending safety check belongs to: `(call id, check)`.
    pub checks_by_call: Vec<(String, SafetyCheck)>,
    /// The ids of calls to the `ask_human` function, answered with a
    /// `function_call_output` rather than a screenshot.
    pub function_calls: Vec<String>,
}

pub fn read_answer(answer: &serde_json::Value) -> Result<Answer, ModelError> {
    let root = At::root(answer);
    let id = root.field("id")?.str()?.to_owned();
    refuse_failed(&root)?;
    let mut turn = Turn { usage: usage(&root)?, ..Turn::default() };
    let mut texts = Vec::new();
    let mut checks_by_call = Vec::new();
    let mut function_calls = Vec::new();
    for item in root.field("output")?.items()? {
        match item.field("type")?.str()? {
            "reasoning" => turn.reasoning.extend(reasoning_summaries(&item)?),
            "message" => texts.extend(message_texts(&item)?),
            "computer_call" => {
                let call = computer_call(&item)?;
                let checks = pending_safety_checks(&item)?;
                checks_by_call.extend(checks.iter().map(|check| (call.id.clone(), check.clone())));
                turn.safety_checks.extend(checks);
                turn.calls.push(call);
            }
            "function_call" => {
                let call = ask_human_call(&item)?;
                function_calls.push(call.id.clone());
                turn.calls.push(call);
            }
            other => tracing::debug!(item_type = other, "skipping an output item this client does not use"),
        }
    }
    turn.text = (!texts.is_empty()).then(|| texts.join("\n\n"));
    refuse_empty_incomplete(&root, &turn)?;
    Ok(Answer { id, turn, checks_by_call, function_calls })
}

/// A response the API itself marks `failed` or `cancelled` carries no turn.
fn refuse_failed(root: &At<'_>) -> Result<(), ModelError> {
    let Some(status) = root.get("status") else {
        return Ok(());
    };
    let status = status.str()?;
    if status != "failed" && status != "cancelled" {
        return Ok(());
    }
    let message = nested_text(root, "error", "message").unwrap_or("no reason given");
    Err(ModelError::Unavailable(format!("the response is {status}: {message}")))
}

/// An `incomplete` response with neither an action nor text would read as
/// "done"; say why it stopped instead.
fn refuse_empty_incomplete(root: &At<'_>, turn: &Turn) -> Result<(), ModelError> {
    let incomplete = root.get("status").is_some_and(|s| s.str().ok() == Some("incomplete"));
    if !incomplete || !turn.calls.is_empty() || turn.text.is_some() {
        return Ok(());
    }
    let reason = nested_text(root, "incomplete_details", "reason").unwrap_or("no reason given");
    Err(ModelError::Malformed(format!("the response is incomplete ({reason}) and holds neither an action nor text")))
}

/// The text at `outer.inner`, when it is there and a string.
fn nested_text<'a>(root: &At<'a>, outer: &str, inner: &str) -> Option<&'a str> {
    root.get(outer)?.get(inner)?.str().ok()
}

fn usage(root: &At<'_>) -> Result<Usage, ModelError> {
    let Some(usage) = root.get("usage") else {
        return Ok(Usage::default());
    };
    let tokens = |name: &str| usage.get(name).map(|n| n.count()).transpose().map(Option::unwrap_or_default);
    let details = usage.get("input_tokens_details");
    let detail =
        |name: &str| details.as_ref().and_then(|d| d.get(name)).map(|n| n.count()).transpose().map(Option::unwrap_or_default);
    Ok(Usage {
        input_tokens: tokens("input_tokens")?,
        output_tokens: tokens("output_tokens")?,
        cache_read_tokens: detail("cached_tokens")?,
        cache_write_tokens: detail("cache_write_tokens")?,
    })
}

/// The texts of a reasoning item's summary parts.
fn reasoning_summaries(item: &At<'_>) -> Result<Vec<String>, ModelError> {
    let Some(summary) = item.get("summary") else {
        return Ok(Vec::new());
    };
    summary.items()?.iter().map(|part| Ok(part.field("text")?.str()?.to_owned())).collect()
}

/// The texts of a message's `output_text` parts, and any refusal.
fn message_texts(item: &At<'_>) -> Result<Vec<String>, ModelError> {
    let mut texts = Vec::new();
    for part in item.field("content")?.items()? {
        let text = match part.field("type")?.str()? {
            "output_text" => part.field("text")?,
            "refusal" => part.field("refusal")?,
            _ => continue,
        };
        texts.push(text.str()?.to_owned());
    }
    Ok(texts)
}

/// A computer call: the preview tool's single `action`, or the GA tool's
/// batch `actions`, in order.
fn computer_call(item: &At<'_>) -> Result<ToolCall, ModelError> {
    let id = item.field("call_id")?.str()?.to_owned();
    let listed = match item.get("actions") {
        Some(batch) => batch.items()?,
        None => vec![item.get("action").ok_or_else(|| item.wrong("has neither `action` nor `actions`"))?],
    };
    let mut actions = Vec::new();
    for action in &listed {
        actions.extend(model_actions(action)?);
    }
    Ok(ToolCall { id, actions })
}

/// A `function_call` of a function offered: `ask_human`, or a browser
/// conversation's `navigate` (whose `url` may be `back`, `forward` or
/// `reload`).
fn ask_human_call(item: &At<'_>) -> Result<ToolCall, ModelError> {
    let id = item.field("call_id")?.str()?.to_owned();
    let name = item.field("name")?.str()?;
    if name != ASK_HUMAN && name != NAVIGATE {
        return Err(item.wrong(&format!("calls {name:?}, a function this client did not offer")));
    }
    let arguments = item.field("arguments")?.str()?;
    let input: serde_json::Value = serde_json::from_str(arguments)
        .map_err(|e| ModelError::Malformed(format!("the arguments of call {id} are not JSON: {e}")))?;
    if name == NAVIGATE {
        let url = input.get("url").and_then(serde_json::Value::as_str).filter(|u| !u.trim().is_empty());
        let url = url.ok_or_else(|| ModelError::Malformed(format!("the arguments of call {id} need a url")))?;
        return Ok(ToolCall { id, actions: vec![ModelAction::Browse(BrowserCall::from_navigate(url))] });
    }
    let question = ask_human_question(&input, "arguments")?;
    Ok(ToolCall { id, actions: vec![ModelAction::AskHuman { question }] })
}

fn pending_safety_checks(item: &At<'_>) -> Result<Vec<SafetyCheck>, ModelError> {
    let Some(checks) = item.get("pending_safety_checks") else {
        return Ok(Vec::new());
    };
    checks.items()?.iter().map(safety_check).collect()
}

/// A check; `code` and `message` are optional in the API.
fn safety_check(check: &At<'_>) -> Result<SafetyCheck, ModelError> {
    let optional = |name: &str| check.get(name).map(|v| v.str().map(str::to_owned)).transpose().map(Option::unwrap_or_default);
    Ok(SafetyCheck { id: check.field("id")?.str()?.to_owned(), code: optional("code")?, message: optional("message")? })
}

#[cfg(test)]
mod tests {
    use flotilla_types::action::{Action, MouseButton};
    use serde_json::json;

    use super::*;
    use crate::model::ModelAction;

    #[test]
    fn an_answer_reads_into_a_turn() {
        let answer = json!({
            "id": "resp_1", "status": "completed",
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Open the menu."}]},
                {"type": "web_search_call", "id": "ws_1"},
                {"type": "computer_call", "id": "cu_1", "call_id": "call_1", "status": "completed",
                 "action": {"type": "click", "x": 1, "y": 2, "button": "right"},
                 "pending_safety_checks": [{"id": "sc_1", "code": "malicious_instructions"}]}
            ],
            "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 6}, "output_tokens": 3, "total_tokens": 13}
        });
        let read = read_answer(&answer).expect("reads");
        assert_eq!(read.id, "resp_1");
        assert_eq!(read.turn.reasoning, ["Open the menu."]);
        assert_eq!(read.turn.text, None);
        assert_eq!(
            read.turn.calls,
            [ToolCall {
                id: "call_1".into(),
                actions: vec![ModelAction::Act(Action::Click { x: 1, y: 2, button: MouseButton::Right })]
            }]
        );
        let check = SafetyCheck { id: "sc_1".into(), code: "malicious_instructions".into(), message: String::new() };
        assert_eq!(read.turn.safety_checks, std::slice::from_ref(&check));
        assert_eq!(read.checks_by_call, [("call_1".to_owned(), check)]);
        assert_eq!(read.turn.usage, Usage { input_tokens: 10, output_tokens: 3, cache_read_tokens: 6, cache_write_tokens: 0 });
    }

    #[test]
    fn messages_join_and_refusals_count_as_text() {
        let answer = json!({"id": "r", "output": [
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]},
            {"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]}
        ]});
        assert_eq!(read_answer(&answer).expect("reads").turn.text.as_deref(), Some("Done.\n\nI cannot."));
    }

    #[test]
    fn failed_and_empty_incomplete_answers_are_errors() {
        let failed = json!({"id": "r", "status": "failed", "error": {"code": "server_error", "message": "boom"}, "output": []});
        assert!(matches!(read_answer(&failed), Err(ModelError::Unavailable(m)) if m.contains("boom")));
        let cut = json!({"id": "r", "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}, "output": []});
        assert!(matches!(read_answer(&cut), Err(ModelError::Malformed(m)) if m.contains("max_output_tokens")));
    }

    #[test]
    fn a_call_without_actions_is_malformed() {
        let answer = json!({"id": "r", "output": [{"type": "computer_call", "call_id": "c"}]});
        assert!(matches!(read_answer(&answer), Err(ModelError::Malformed(m)) if m.starts_with("output[0] has neither")));
        let no_id = json!({"output": []});
        assert!(matches!(read_answer(&no_id), Err(ModelError::Malformed(m)) if m == "id is missing"));
    }
}
