//! OSWorld's task format read into task specs: its `config` steps become
//! the spec's `setup` and its `evaluator` the spec's `check`, so a suite
//! written for OSWorld runs on a fleet's desktops.
//!
//! Steps taken: `download` (curl into place), `open` (`xdg-open`),
//! `launch` (a program left running), `execute` and `command` (run and
//! waited for), `sleep`. Evaluators taken: `infeasible` (passes when the
//! agent did not end `done`), `exact_match` and `check_include_exclude`
//! over a command's output (`vm_command_line`) or a file (`vm_file`), and
//! `compare_text_file` of a file in the sandbox against a file beside the
//! task (a relative path, placed by the set-up) or at a URL (fetched by the
//! check). Anything else is refused by name, so a suite never runs with a
//! step or a judgement left out. OSWorld's home, `/home/user`, is the
//! sandbox user's home.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Map, Value};

/// OSWorld's user home, read as the sandbox user's.
const OSWORLD_HOME: &str = "/home/user";
/// Where the set-up places expected files for the check.
const EXPECTED_DIR: &str = ".flotilla/expected";

/// Whether a JSON object is an OSWorld task rather than a task spec.
pub fn is_osworld(task: &Map<String, Value>) -> bool {
    task.contains_key("instruction") && task.contains_key("evaluator")
}

/// The task spec of an OSWorld task; `dir` is where the task's file is
/// (relative expected files are read from there). With `reference`, the
/// task runs its scripted reference solution (`flotilla_reference`, a
/// list of actions) with the `scripted` pipeline: the suite's dry run.
pub fn import(task: &Map<String, Value>, dir: &Path, reference: bool) -> Result<Value, String> {
    let instruction = task.get("instruction").and_then(Value::as_str).ok_or("instruction must be text")?;
    let mut files = BTreeMap::new();
    let mut commands = Vec::new();
    for (i, step) in task.get("config").and_then(Value::as_array).into_iter().flatten().enumerate() {
        config_step(step, &mut commands).map_err(|e| format!("config[{i}]: {e}"))?;
    }
    let evaluator = task.get("evaluator").and_then(Value::as_object).ok_or("evaluator must be an object")?;
    let check = evaluator_check(evaluator, dir, &mut files).map_err(|e| format!("evaluator: {e}"))?;
    let mut spec = json!({
        "prompt": instruction,
        "check": {"command": check},
    });
    if reference {
        let actions = task.get("flotilla_reference").ok_or("no flotilla_reference to run")?;
        spec["pipeline"] = "scripted".into();
        spec["actions"] = actions.clone();
    }
    if let Some(id) = task.get("id").and_then(Value::as_str) {
        spec["metadata"] = json!({"name": id, "source": "osworld"});
    }
    if !files.is_empty() || !commands.is_empty() {
        let mut setup = Map::new();
        if !files.is_empty() {
            setup.insert("files".into(), json!(files));
        }
        if !commands.is_empty() {
            setup.insert("commands".into(), json!(commands));
        }
        spec["setup"] = Value::Object(setup);
    }
    Ok(spec)
}

/// One `config` step as set-up commands.
fn config_step(step: &Value, commands: &mut Vec<String>) -> Result<(), String> {
    let kind = step.get("type").and_then(Value::as_str).ok_or("a step needs a type")?;
    let empty = Map::new();
    let params = step.get("parameters").and_then(Value::as_object).unwrap_or(&empty);
    match kind {
        "download" => {
            for file in params.get("files").and_then(Value::as_array).ok_or("download needs files")? {
                let url = file.get("url").and_then(Value::as_str).ok_or("a downloaded file needs a url")?;
                let path = path_arg(file.get("path").and_then(Value::as_str).ok_or("a downloaded file needs a path")?);
                commands.push(format!("mkdir -p \"$(dirname {path})\" && curl -fsSL --retry 2 -o {path} {}", quote(url)));
            }
        }
        "open" => {
            let path = path_arg(params.get("path").and_then(Value::as_str).ok_or("open needs a path")?);
            commands.push(format!("(setsid xdg-open {path} >/dev/null 2>&1 &)"));
        }
        "launch" => commands.push(format!("(setsid {} >/dev/null 2>&1 &)", command_text(params)?)),
        "execute" | "command" => commands.push(command_text(params)?),
        "sleep" => {
            let seconds = params.get("seconds").and_then(Value::as_f64).ok_or("sleep needs seconds")?;
            commands.push(format!("sleep {seconds}"));
        }
        other => return Err(format!("step type {other:?} cannot run on these desktops")),
    }
    Ok(())
}

/// A step's `command`: a list of arguments (quoted one by one) or, with
/// `shell: true` or as a string, shell text.
fn command_text(params: &Map<String, Value>) -> Result<String, String> {
    match params.get("command") {
        Some(Value::String(text)) => Ok(text.replace(OSWORLD_HOME, "$HOME")),
        Some(Value::Array(args)) => {
            let args: Option<Vec<&str>> = args.iter().map(Value::as_str).collect();
            let args = args.ok_or("a command's arguments must be text")?;
            if params.get("shell").and_then(Value::as_bool) == Some(true) {
                return Ok(args.join(" ").replace(OSWORLD_HOME, "$HOME"));
            }
            Ok(args.iter().map(|a| path_arg(a)).collect::<Vec<_>>().join(" "))
        }
        _ => Err("a command must be text or a list of arguments".into()),
    }
}

/// The check command of an evaluator.
fn evaluator_check(evaluator: &Map<String, Value>, dir: &Path, files: &mut BTreeMap<String, String>) -> Result<String, String> {
    let func = match evaluator.get("func") {
        Some(Value::String(func)) => func.as_str(),
        Some(Value::Array(_)) => return Err("a list of evaluator functions is not supported".into()),
        _ => return Err("func must be text".into()),
    };
    if func == "infeasible" {
        return Ok(
            "test \"$FLOTILLA_OUTCOME\" != done || { echo 'the agent did not call the task infeasible' >&2; exit 1; }".into()
        );
    }
    let result = evaluator.get("result").and_then(Value::as_object).ok_or("result must be an object")?;
    let expected = evaluator.get("expected").and_then(Value::as_object).ok_or("expected must be an object")?;
    let produce = result_text(result)?;
    let rules = || expected.get("rules").and_then(Value::as_object).ok_or("expected needs rules");
    match func {
        "exact_match" => {
            let want = rules()?.get("expected").and_then(Value::as_str).ok_or("exact_match needs rules.expected")?;
            Ok(format!(
                "got=$({produce}); test \"$got\" = {} || {{ echo \"got: $got\" >&2; exit 1; }}",
                quote(want.trim_end_matches('\n'))
            ))
        }
        "check_include_exclude" => {
            let rules = rules()?;
            let list = |name: &str| -> Vec<String> {
                rules.get(name).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_str).map(quote).collect()
            };
            let mut command = format!("got=$({produce})");
            for word in list("include") {
                command.push_str(&format!("; case \"$got\" in *{word}*) ;; *) echo missing {word} >&2; exit 1;; esac"));
            }
            for word in list("exclude") {
                command.push_str(&format!("; case \"$got\" in *{word}*) echo unwanted {word} >&2; exit 1;; esac"));
            }
            Ok(command)
        }
        "compare_text_file" => {
            let path = result.get("path").and_then(Value::as_str).ok_or("compare_text_file needs result.path")?;
            let source = expected.get("path").and_then(Value::as_str).ok_or("compare_text_file needs expected.path")?;
            let name = format!("{EXPECTED_DIR}/{}", files.len());
            let fetch = if source.starts_with("http://") || source.starts_with("https://") {
                format!("mkdir -p {EXPECTED_DIR} && curl -fsSL -o {name} {} && ", quote(source))
            } else {
                let text = std::fs::read_to_string(dir.join(source)).map_err(|e| format!("cannot read {source}: {e}"))?;
                files.insert(name.clone(), text);
                String::new()
            };
            Ok(format!(
                "{fetch}cmp -s {name} {} || {{ echo 'the file differs from the expected one' >&2; exit 1; }}",
                path_arg(path)
            ))
        }
        other => Err(format!("evaluator {other:?} cannot run on these desktops")),
    }
}

/// A shell command printing what an evaluator's `result` names.
fn result_text(result: &Map<String, Value>) -> Result<String, String> {
    match result.get("type").and_then(Value::as_str) {
        Some("vm_command_line") => command_text(result),
        Some("vm_file") => {
            Ok(format!("cat {}", path_arg(result.get("path").and_then(Value::as_str).ok_or("vm_file needs a path")?)))
        }
        Some(other) => Err(format!("result type {other:?} cannot be read on these desktops")),
        None => Err("result needs a type".into()),
    }
}

/// A path as one shell word, OSWorld's home read as the sandbox user's.
fn path_arg(path: &str) -> String {
    match path.strip_prefix(OSWORLD_HOME) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("\"$HOME\"{}", quote(rest)),
        _ => quote(path),
    }
}

/// Text as one single-quoted shell word.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().expect("object").clone()
    }

    #[test]
    fn config_steps_become_setup_commands_and_evaluators_a_check() {
        let task = object(json!({
            "id": "t-1",
            "instruction": "make the file",
            "config": [
                {"type": "execute", "parameters": {"command": ["touch", "/home/user/a b.txt"]}},
                {"type": "launch", "parameters": {"command": "xterm", "shell": true}},
                {"type": "sleep", "parameters": {"seconds": 1}}
            ],
            "evaluator": {"func": "check_include_exclude",
                "result": {"type": "vm_command_line", "command": "ls /home/user", "shell": true},
                "expected": {"type": "rule", "rules": {"include": ["a b.txt"], "exclude": ["c.txt"]}}}
        }));
        let spec = import(&task, Path::new("."), false).expect("imports");
        assert_eq!(spec["prompt"], "make the file");
        assert_eq!(spec["metadata"]["name"], "t-1");
        assert_eq!(spec["setup"]["commands"][0], "'touch' \"$HOME\"'/a b.txt'");
        assert_eq!(spec["setup"]["commands"][1], "(setsid xterm >/dev/null 2>&1 &)");
        let check = spec["check"]["command"].as_str().expect("check");
        assert!(check.starts_with("got=$(ls $HOME)"), "{check}");
        assert!(check.contains("*'a b.txt'*) ;;") && check.contains("*'c.txt'*) echo unwanted"), "{check}");
    }

    #[test]
    fn steps_and_evaluators_that_cannot_run_here_are_refused_by_name() {
        let task = object(json!({"instruction": "x", "config": [{"type": "chrome_open_tabs", "parameters": {}}],
            "evaluator": {"func": "infeasible"}}));
        assert_eq!(
            import(&task, Path::new("."), false).expect_err("refused"),
            "config[0]: step type \"chrome_open_tabs\" cannot run on these desktops"
        );
        let task = object(json!({"instruction": "x", "evaluator": {"func": "compare_table",
            "result": {"type": "vm_file", "path": "/home/user/a.xlsx"}, "expected": {"type": "rule", "rules": {}}}}));
        assert!(import(&task, Path::new("."), false).expect_err("refused").contains("\"compare_table\""));
    }

    #[test]
    fn quoting_keeps_every_character() {
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(path_arg("/home/username"), "'/home/username'", "only the home itself is mapped");
        assert_eq!(path_arg("/tmp/x"), "'/tmp/x'");
    }
}
