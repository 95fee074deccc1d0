//! Builds the task spec `flotilla submit` sends: the `--spec` file if any,
//! then each flag given replacing its field. The API validates the result;
//! this only refuses what cannot be a spec at all (no prompt, not an object).

use std::io::Read;
use std::path::Path;

use anyhow::{bail, Context};
use serde_json::{json, Map, Value};

use crate::args::SubmitArgs;
use crate::json_text::{self, Position};

/// Reads a spec file, or stdin for `-`, as a JSON object.
pub fn read_spec_file(path: &Path) -> anyhow::Result<Map<String, Value>> {
    let shown = path.display();
    let text = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("cannot read the spec from stdin")?;
        text
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read spec file {shown}"))?
    };
    match json_text::parse(&text, Position::LineAndColumn) {
        Ok(Value::Object(spec)) => Ok(spec),
        Ok(_) => bail!("spec file {shown} must hold a JSON object"),
        Err(problem) => bail!("spec file {shown}: {problem}"),
    }
}

/// The spec to submit: `base` (from `--spec`) with the flags laid over it.
pub fn build_spec(args: &SubmitArgs, base: Option<Map<String, Value>>) -> anyhow::Result<Value> {
    let mut spec = base.unwrap_or_default();
    set(&mut spec, "prompt", args.prompt.clone().map(Value::from));
    set(&mut spec, "pipeline", args.pipeline.clone().map(Value::from));
    set(&mut spec, "model", args.model.clone().map(Value::from));
    set(&mut spec, "priority", args.priority.map(|p| Value::from(p.as_str())));
    set(&mut spec, "idempotency_key", args.idempotency_key.clone().map(Value::from));
    set(&mut spec, "metadata", args.metadata.clone());
    set(&mut spec, "not_before", args.not_before.clone().map(Value::from));
    if !args.actions.is_empty() {
        spec.insert("actions".to_owned(), Value::Array(args.actions.clone()));
        spec.entry("pipeline").or_insert_with(|| Value::from("scripted"));
    }
    if let Some(max_attempts) = args.max_attempts {
        set_max_attempts(&mut spec, max_attempts);
    }
    if spec.get("prompt").and_then(Value::as_str).is_none_or(|p| p.trim().is_empty()) {
        bail!("a prompt is needed: give PROMPT or a --spec file with \"prompt\"");
    }
    Ok(Value::Object(spec))
}

fn set(spec: &mut Map<String, Value>, field: &str, value: Option<Value>) {
    if let Some(value) = value {
        spec.insert(field.to_owned(), value);
    }
}

/// Sets `retry.max_attempts`, keeping any other retry settings of the file.
fn set_max_attempts(spec: &mut Map<String, Value>, max_attempts: u32) {
    let retry = spec.entry("retry").or_insert_with(|| json!({}));
    match retry.as_object_mut() {
        Some(retry) => {
            retry.insert("max_attempts".to_owned(), Value::from(max_attempts));
        }
        None => *retry = json!({"max_attempts": max_attempts}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{parse_from, Command};

    fn spec_for(flags: &[&str], base: Option<Value>) -> anyhow::Result<Value> {
        let cli = parse_from(["flotilla", "submit"].iter().chain(flags)).expect("parses");
        let Command::Submit(args) = cli.command else { panic!("not submit") };
        let base = base.map(|b| b.as_object().cloned().expect("an object"));
        build_spec(&args, base)
    }

    #[test]
    fn flags_alone_make_a_spec() {
        let spec = spec_for(
            &["open the site", "--model", "m1", "--priority", "high", "--max-attempts", "2", "--idempotency-key", "k1"],
            None,
        )
        .expect("spec");
        assert_eq!(
            spec,
            json!({"prompt": "open the site", "model": "m1", "priority": "high", "retry": {"max_attempts": 2}, "idempotency_key": "k1"})
        );
    }

    #[test]
    fn actions_make_a_scripted_task_unless_a_pipeline_is_given() {
        let spec = spec_for(&["wait", "--wait-ms", "200"], None).expect("spec");
        assert_eq!(spec, json!({"prompt": "wait", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 200}]}));
        let base = json!({"prompt": "p", "pipeline": "openai-cua"});
        let spec = spec_for(&["--action", r#"{"type":"screenshot"}"#], Some(base)).expect("spec");
        assert_eq!(spec["pipeline"], "openai-cua", "the API, not the client, judges the mix");
    }

    #[test]
    fn flags_override_the_spec_file_field_by_field() {
        let base = json!({
            "prompt": "from file",
            "pipeline": "scripted",
            "actions": [{"type": "wait", "ms": 1}],
            "retry": {"max_attempts": 5, "extra": true},
            "metadata": {"a": 1},
            "sandbox": {"provider": "local"}
        });
        let flags = [
            "from flag",
            "--wait-ms",
            "9",
            "--max-attempts",
            "1",
            "--metadata",
            r#"{"b":2}"#,
            "--not-before",
            "2030-01-01T00:00:00Z",
        ];
        let spec = spec_for(&flags, Some(base)).expect("spec");
        assert_eq!(
            spec,
            json!({
                "prompt": "from flag",
                "pipeline": "scripted",
                "actions": [{"type": "wait", "ms": 9}],
                "retry": {"max_attempts": 1, "extra": true},
                "metadata": {"b": 2},
                "not_before": "2030-01-01T00:00:00Z",
                "sandbox": {"provider": "local"}
            })
        );
    }

    #[test]
    fn the_file_prompt_is_kept_when_no_prompt_flag_is_given() {
        let spec = spec_for(&["--priority", "low"], Some(json!({"prompt": "from file"}))).expect("spec");
        assert_eq!(spec, json!({"prompt": "from file", "priority": "low"}));
    }

    #[test]
    fn a_spec_needs_a_prompt() {
        let err = spec_for(&["--model", "m"], None).expect_err("no prompt");
        assert_eq!(err.to_string(), "a prompt is needed: give PROMPT or a --spec file with \"prompt\"");
        assert!(spec_for(&["  "], None).is_err());
    }

    #[test]
    fn spec_files_must_be_json_objects() {
        let dir = std::env::temp_dir().join(format!("flotilla-cli-spec-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let good = dir.join("good.json");
        std::fs::write(&good, r#"{"prompt": "x"}"#).expect("write");
        assert_eq!(read_spec_file(&good).expect("reads")["prompt"], "x");
        let list = dir.join("list.json");
        std::fs::write(&list, "[1]").expect("write");
        assert!(read_spec_file(&list).expect_err("a list").to_string().ends_with("must hold a JSON object"));
        let missing = dir.join("missing.json");
        assert!(read_spec_file(&missing).expect_err("missing").to_string().starts_with("cannot read spec file"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
