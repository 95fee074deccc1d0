//! Durable claude-code runs: the step journal holds the CLI's session id
//! (chosen before the CLI starts), so a task whose worker is SIGKILLed while
//! the real `claude` CLI runs is taken up by another worker in the same
//! desktop, which runs the CLI again with `--resume` in the same work
//! directory: the session goes on with every earlier turn, and the
//! command the CLI already ran is not run again. On the same stand as
//! `durable_runs` (sandboxd desktops through the E2B provider, a real
//! Redis with a 5 s lease, s3s-fs), each worker's model gateway on the
//! host's address the desktops reach, in front of the fake Anthropic
//! Messages server.

use std::time::Duration;

use flotilla_tests::desktop::{eventually, sandbox_ids};
use flotilla_tests::fakes::anthropic::{streamed_answer, streamed_tool_turn};
use flotilla_tests::fakes::Recorded;
use flotilla_tests::fleet::WorkerProcess;
use flotilla_tests::tasks::record;
use flotilla_types::event::{Event, EventKind};
use flotilla_types::task::TaskStatus;
use serde_json::{json, Value};

use crate::durable_runs::{resumed, terminal_count, Size, Stand};

fn model_calls(stand: &Stand) -> Vec<Recorded> {
    stand.model.received().into_iter().filter(|r| r.path.starts_with("/v1/messages")).collect()
}

/// The session ids the CLI's `system` lines named, in order (one per run).
fn init_sessions(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Block { block } if block["type"] == "system" && block["subtype"] == "init" => {
                block["session_id"].as_str().map(str::to_owned)
            }
            _ => None,
        })
        .collect()
}

/// The session id the task's journal holds.
fn journaled_session(stand: &Stand, id: &flotilla_types::ids::TaskId) -> Option<String> {
    let journal: Value = serde_json::from_str(&stand.journal(id)).ok()?;
    journal["cli"]["session_id"].as_str().map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_claude_code_task_resumes_its_session_in_the_same_sandbox() {
    let stand = Stand::start_sized(Size { gateway: true, ..Size::default() }).await;
    let bash = json!({"command": "echo one >> log.txt", "description": "note the first step"});
    stand.model.push(streamed_tool_turn("Noting the first step.", "toolu_one", "Bash", bash));
    // The answer the killed run waits for: it never reaches it.
    stand.model.push(streamed_answer("Never seen.").after(Duration::from_secs(60)));
    stand.model.push(streamed_answer("Done: log.txt has the first step."));
    let mut doomed = WorkerProcess::spawn(&stand.env, "doomed");
    let id = stand
        .submit(json!({
            "prompt": "note the first step in log.txt",
            "pipeline": "claude-code",
            "on_interrupt": "resume",
            "retry": {"max_attempts": 3}
        }))
        .await;

    // Killed while the CLI waits for its second model call.
    eventually("the CLI makes its second model call", Duration::from_secs(120), async || model_calls(&stand).len() >= 2).await;
    let session =
        journaled_session(&stand, &id).unwrap_or_else(|| panic!("the journal holds the CLI's session: {}", stand.journal(&id)));
    doomed.signal("KILL");
    assert!(doomed.wait_exit(5), "SIGKILL ends the worker");

    let _second = WorkerProcess::spawn(&stand.env, "second");
    let history = stand.wait_ended(&id).await;
    let task = record(&stand.queue, &id).await;
    assert_eq!(task.status, TaskStatus::Succeeded, "{:?} {history:?}", task.error);
    assert_eq!(terminal_count(&history), 1, "the task ends once: {history:?}");
    let sandbox = sandbox_ids(&history).remove(0);
    assert!(sandbox_ids(&history).iter().all(|s| *s == sandbox), "every attempt ran in the same desktop: {history:?}");
    assert_eq!(resumed(&history), vec![(2, 0, sandbox, false)], "taken up in the same sandbox: {history:?}");
    // The E2B provider hands a command's lines over once it ends, so only
    // the resumed run's lines (its `init` first) are blocks.
    assert_eq!(init_sessions(&history), vec![session.clone()], "the resumed run goes on with the journaled session");
    let result = task.result.unwrap_or_default();
    assert_eq!(result["session_id"], session.as_str(), "{result}");
    assert_eq!(result["text"], "Done: log.txt has the first step.", "{result}");
    assert_eq!(stand.output(&id, "log.txt").await, "one\n", "the command the CLI ran before the kill ran once");

    let calls = model_calls(&stand);
    assert_eq!(calls.len(), 3, "the interrupted call is the only one made again");
    let resumed_call = &calls[2];
    let messages = resumed_call.body["messages"].to_string();
    assert!(
        messages.contains("note the first step in log.txt") && messages.contains("toolu_one"),
        "the resumed session's call carries the earlier turns: {messages}"
    );
    assert!(messages.contains("interrupted"), "the CLI is told the run was interrupted: {messages}");
    assert_eq!(resumed_call.header("x-claude-code-session-id"), Some(session.as_str()));
}
