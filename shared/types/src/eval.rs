//! Evaluations: what puts a task's sandbox into a known state before its
//! agent starts (`setup`), what judges the sandbox after the agent stops
//! (`check`), and the verdict that judgement gives. How a batch runs a
//! suite several times is [`crate::eval_plan`].
//!
//! A check's output is read here, as plain data ([`judge`]), so the worker
//! that runs it and the tests that pin its rules read it the same way.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::action::Action;
use crate::error::ValidationError;

/// The most files a set-up places.
pub const MAX_SETUP_FILES: usize = 100;
/// The most commands a set-up runs.
pub const MAX_SETUP_COMMANDS: usize = 50;
/// The longest command of a set-up or check, in characters.
pub const MAX_COMMAND_CHARS: usize = 10_000;
/// How long a set-up command or a check may run when it names no time.
pub const DEFAULT_COMMAND_TIMEOUT_S: u64 = 60;
/// The longest a set-up command or a check may run.
pub const MAX_COMMAND_TIMEOUT_S: u64 = 1_800;
/// The most actions a check runs.
pub const MAX_CHECK_ACTIONS: usize = 100;
/// The longest `reason` kept from a check, in characters.
pub const MAX_REASON_CHARS: usize = 2_000;

/// What runs in a task's sandbox before its agent starts: files placed
/// first, then commands run one by one; a command that exits non-zero ends
/// the task with code `problem` before any model call.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskSetup {
    /// Files to place, by path (relative to the sandbox user's home, or
    /// absolute), with their text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<BTreeMap<String, String>>,
    /// Shell commands (bash, in the home directory, on the desktop's
    /// display), run in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 50))]
    pub commands: Option<Vec<String>>,
    /// How long each command may run, in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1800))]
    pub timeout_s: Option<u64>,
}

/// What judges a task after its agent stops: scripted `actions` on its
/// desktop (saving a document, closing a dialog), then a `command` run in
/// its sandbox. The command's exit 0 passes and anything else fails, unless
/// a line of its standard output is a JSON object with a `score` from 0 to
/// 1 (and a `reason`): then the score decides, and only a score of 1
/// passes. A check of actions alone passes when every action ran, and is
/// an `error` when one could not.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TaskCheck {
    /// Actions run on the desktop, in order, before the command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(max_items = 100))]
    pub actions: Option<Vec<Action>>,
    /// A shell command (bash, in the home directory, on the desktop's
    /// display) whose exit code or score line judges the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_length = 1, max_length = 10000))]
    pub command: Option<String>,
    /// How long the check may run, in seconds (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(minimum = 1, maximum = 1800))]
    pub timeout_s: Option<u64>,
}

impl TaskSetup {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(files) = &self.files {
            if files.len() > MAX_SETUP_FILES {
                return Err(ValidationError::at("files", format!("at most {MAX_SETUP_FILES} files")));
            }
            for path in files.keys() {
                check_path(path).map_err(|e| e.under("files"))?;
            }
        }
        if let Some(commands) = &self.commands {
            if commands.len() > MAX_SETUP_COMMANDS {
                return Err(ValidationError::at("commands", format!("at most {MAX_SETUP_COMMANDS} commands")));
            }
            for (i, command) in commands.iter().enumerate() {
                check_command(command).map_err(|m| ValidationError::at(format!("commands[{i}]"), m))?;
            }
        }
        check_timeout(self.timeout_s)
    }

    /// How long each command may run.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_s.unwrap_or(DEFAULT_COMMAND_TIMEOUT_S))
    }
}

impl TaskCheck {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.command.is_none() && self.actions.as_ref().is_none_or(Vec::is_empty) {
            return Err(ValidationError::new("a check needs a command, actions, or both"));
        }
        if let Some(command) = &self.command {
            check_command(command).map_err(|m| ValidationError::at("command", m))?;
        }
        if let Some(actions) = &self.actions {
            if actions.len() > MAX_CHECK_ACTIONS {
                return Err(ValidationError::at("actions", format!("at most {MAX_CHECK_ACTIONS} actions")));
            }
            for (i, action) in actions.iter().enumerate() {
                action.validate().map_err(|e| e.under(&format!("actions[{i}]")))?;
            }
        }
        check_timeout(self.timeout_s)
    }

    /// How long the check may run.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_s.unwrap_or(DEFAULT_COMMAND_TIMEOUT_S))
    }
}

fn check_path(path: &str) -> Result<(), ValidationError> {
    let bad = path.is_empty()
        || path.chars().count() > 1024
        || path.chars().any(char::is_control)
        || path.split('/').any(|p| p == "..");
    if bad {
        return Err(ValidationError::at(path.to_owned(), "a file path is 1 to 1024 printable characters without `..`"));
    }
    Ok(())
}

fn check_command(command: &str) -> Result<(), String> {
    if command.trim().is_empty() || command.chars().count() > MAX_COMMAND_CHARS || command.contains('\0') {
        return Err(format!("a command is 1 to {MAX_COMMAND_CHARS} characters, not only white space"));
    }
    Ok(())
}

fn check_timeout(timeout_s: Option<u64>) -> Result<(), ValidationError> {
    match timeout_s {
        Some(t) if !(1..=MAX_COMMAND_TIMEOUT_S).contains(&t) => {
            Err(ValidationError::at("timeout_s", format!("timeout_s must be from 1 to {MAX_COMMAND_TIMEOUT_S}")))
        }
        _ => Ok(()),
    }
}

/// Whether a task reached its goal, as its check judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Passed,
    Failed,
    /// The task could not be judged: its set-up failed, or its check could
    /// not run or answered nonsense.
    Error,
}

impl Verdict {
    pub const ALL: [Verdict; 3] = [Verdict::Passed, Verdict::Failed, Verdict::Error];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == text)
    }
}

/// Which part of an evaluation gave a verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum CheckStage {
    /// The set-up failed: the agent never started (verdict `error`).
    Setup,
    /// The check ran after the agent stopped.
    Check,
}

impl CheckStage {
    pub fn as_str(self) -> &'static str {
        match self {
            CheckStage::Setup => "setup",
            CheckStage::Check => "check",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [CheckStage::Setup, CheckStage::Check].into_iter().find(|s| s.as_str() == text)
    }
}

/// A verdict with its score and reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub verdict: Verdict,
    pub score: Option<f64>,
    pub reason: String,
}

impl Judgement {
    /// A task that could not be judged, and why.
    pub fn error(reason: impl Into<String>) -> Self {
        Self { verdict: Verdict::Error, score: None, reason: clip(&reason.into()) }
    }
}

/// The JSON line a check may print.
#[derive(Deserialize)]
struct ScoreLine {
    score: serde_json::Value,
    #[serde(default)]
    reason: Option<String>,
}

/// Reads a finished check: its last standard-output line that is a JSON
/// object with a `score` decides (a score outside 0 to 1, or not a number,
/// is an `error`); without one, exit 0 passes (score 1) and anything else
/// fails (score 0), with the end of standard error as the reason.
pub fn judge(exit_code: i32, stdout: &str, stderr: &str) -> Judgement {
    let line = stdout.lines().rev().find_map(|line| {
        let line = line.trim();
        line.starts_with('{').then(|| serde_json::from_str::<ScoreLine>(line).ok()).flatten()
    });
    if let Some(line) = line {
        let reason = clip(line.reason.as_deref().unwrap_or(""));
        return match line.score.as_f64() {
            Some(score) if (0.0..=1.0).contains(&score) => {
                let verdict = if score >= 1.0 { Verdict::Passed } else { Verdict::Failed };
                Judgement { verdict, score: Some(score), reason }
            }
            _ => Judgement::error(format!("the check's score {} is not a number from 0 to 1", line.score)),
        };
    }
    if exit_code == 0 {
        return Judgement { verdict: Verdict::Passed, score: Some(1.0), reason: String::new() };
    }
    let tail = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let reason =
        if tail.is_empty() { format!("the check exited {exit_code}") } else { format!("the check exited {exit_code}: {tail}") };
    Judgement { verdict: Verdict::Failed, score: Some(0.0), reason: clip(&reason) }
}

/// Text cut to [`MAX_REASON_CHARS`].
fn clip(text: &str) -> String {
    text.chars().take(MAX_REASON_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_pass_and_fail_without_a_score_line() {
        let passed = judge(0, "all good\n", "");
        assert_eq!((passed.verdict, passed.score), (Verdict::Passed, Some(1.0)));
        let failed = judge(1, "", "warning\nno such file: out.txt\n");
        assert_eq!((failed.verdict, failed.score), (Verdict::Failed, Some(0.0)));
        assert_eq!(failed.reason, "the check exited 1: no such file: out.txt");
    }

    #[test]
    fn the_last_score_line_decides_whatever_the_exit_code() {
        let half = judge(0, "{\"score\": 1}\nnoise\n{\"score\": 0.5, \"reason\": \"one of two\"}\n", "");
        assert_eq!((half.verdict, half.score, half.reason.as_str()), (Verdict::Failed, Some(0.5), "one of two"));
        let full = judge(3, "{\"score\": 1, \"reason\": \"ok\"}", "");
        assert_eq!(full.verdict, Verdict::Passed);
        assert_eq!(judge(0, "{\"score\": 1.5}", "").verdict, Verdict::Error);
        assert_eq!(judge(0, "{\"score\": \"high\"}", "").verdict, Verdict::Error);
        assert_eq!(judge(0, "{\"other\": 1}", "").verdict, Verdict::Passed, "a JSON line without a score is noise");
    }

    #[test]
    fn set_ups_and_checks_have_bounds() {
        let setup = TaskSetup { files: Some(BTreeMap::from([("../x".into(), String::new())])), ..TaskSetup::default() };
        assert!(setup.validate().is_err());
        let setup = TaskSetup { commands: Some(vec!["  ".into()]), ..TaskSetup::default() };
        assert_eq!(setup.validate().expect_err("blank").field.as_deref(), Some("commands[0]"));
        let command = |timeout_s| TaskCheck { command: Some("true".into()), timeout_s, ..TaskCheck::default() };
        assert!(command(Some(0)).validate().is_err());
        assert!(command(None).validate().is_ok());
        assert!(TaskCheck::default().validate().is_err(), "a check with nothing to do");
        let actions = |actions: Vec<Action>| TaskCheck { actions: Some(actions), ..TaskCheck::default() };
        assert!(actions(vec![]).validate().is_err());
        assert!(actions(vec![Action::Keypress { keys: vec!["ctrl".into(), "s".into()] }]).validate().is_ok());
        let bad = actions(vec![Action::Wait { ms: 1 }, Action::Type { text: String::new() }]).validate().expect_err("empty text");
        assert_eq!(bad.field.as_deref(), Some("actions[1].text"));
        assert!(actions(vec![Action::Wait { ms: 1 }; MAX_CHECK_ACTIONS + 1]).validate().is_err());
    }
}
