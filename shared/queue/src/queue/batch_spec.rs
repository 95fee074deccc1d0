//! The specs of a batch: each task given is laid over the batch's
//! `defaults` as a JSON merge patch (RFC 7386: objects merge key by key,
//! anything else replaces, `null` removes), before the result is parsed, so
//! an unknown field is still refused. Every spec is checked before any is
//! accepted, and an error names where it came from: `tasks[3].prompt`, or
//! `defaults.sandbox.resolution` when the bad value is one the task inherited.

use serde_json::{Map, Value};

use flotilla_types::error::ValidationError;
use flotilla_types::task::{Pipeline, TaskSpec};

/// The most tasks one batch may hold.
pub const MAX_BATCH_TASKS: usize = 10_000;

/// The validated specs of a batch, in the order given.
pub fn batch_specs(
    tasks: &[Value],
    defaults: Option<&Map<String, Value>>,
    pipeline: Pipeline,
) -> Result<Vec<TaskSpec>, ValidationError> {
    if tasks.is_empty() || tasks.len() > MAX_BATCH_TASKS {
        return Err(ValidationError::at("tasks", format!("a batch holds 1 to {MAX_BATCH_TASKS} tasks")));
    }
    if defaults.is_some_and(|d| d.get("idempotency_key").is_some_and(|k| !k.is_null())) {
        return Err(ValidationError::at("defaults.idempotency_key", "idempotency keys are not accepted in a batch"));
    }
    if let Some(defaults) = defaults {
        defaults_fields(defaults).map_err(|e| e.under("defaults"))?;
    }
    let mut specs = Vec::with_capacity(tasks.len());
    for (index, task) in tasks.iter().enumerate() {
        let Value::Object(task) = task else {
            return Err(ValidationError::at(format!("tasks[{index}]"), "each task must be a JSON object"));
        };
        let spec = task_spec(task, defaults, pipeline).map_err(|e| place(e, task, defaults, index))?;
        specs.push(spec);
    }
    Ok(specs)
}

/// Checks `defaults` on their own, field by field, as the document states
/// them: each value one its field takes, within its bounds, even where every
/// task overrides it. The rules between fields (which pipeline takes which)
/// apply to each merged spec only.
fn defaults_fields(defaults: &Map<String, Value>) -> Result<(), ValidationError> {
    let mut fields = defaults.clone();
    fields.entry("prompt").or_insert_with(|| Value::from("a prompt the defaults leave to the tasks"));
    spec_from_value(Value::Object(fields))?.validate_fields()
}

/// Checks each spec's sandbox template against `allowed` (the tenant's
/// `sandbox_templates`); the error names the field where the template came
/// from, as [`batch_specs`] does.
pub fn check_batch_templates(
    specs: &[TaskSpec],
    tasks: &[Value],
    defaults: Option<&Map<String, Value>>,
    allowed: &[String],
) -> Result<(), ValidationError> {
    for (index, (spec, task)) in specs.iter().zip(tasks).enumerate() {
        if let Err(e) = spec.check_template(allowed) {
            let empty = Map::new();
            return Err(place(e, task.as_object().unwrap_or(&empty), defaults, index));
        }
    }
    Ok(())
}

/// One task's spec: the task over the defaults (over `{}` without them, so
/// a `null` removes its key in either case), parsed and validated.
fn task_spec(
    task: &Map<String, Value>,
    defaults: Option<&Map<String, Value>>,
    pipeline: Pipeline,
) -> Result<TaskSpec, ValidationError> {
    let merged = merge_patch(Value::Object(defaults.cloned().unwrap_or_default()), task);
    let spec = spec_from_value(merged)?.with_default_pipeline(pipeline);
    if spec.idempotency_key.is_some() {
        return Err(ValidationError::at("idempotency_key", "idempotency keys are not accepted in a batch"));
    }
    spec.validate()?;
    Ok(spec)
}

/// Applies `patch` to `target` as RFC 7386 says.
fn merge_patch(target: Value, patch: &Map<String, Value>) -> Value {
    let mut target = match target {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    for (key, value) in patch {
        match value {
            Value::Null => {
                target.remove(key);
            }
            Value::Object(inner) => {
                let current = target.remove(key).unwrap_or(Value::Null);
                target.insert(key.clone(), merge_patch(current, inner));
            }
            other => {
                target.insert(key.clone(), other.clone());
            }
        }
    }
    Value::Object(target)
}

/// Parses a spec from a JSON value, naming the offending field on failure.
fn spec_from_value(value: Value) -> Result<TaskSpec, ValidationError> {
    serde_path_to_error::deserialize(value).map_err(|err| {
        let path = err.path().to_string();
        let message = err.into_inner().to_string();
        if path == "." || path.is_empty() {
            ValidationError::new(message)
        } else {
            ValidationError::at(path, message)
        }
    })
}

/// Puts a task's error under `defaults` when the bad value came from there,
/// else under `tasks[index]`.
fn place(
    err: ValidationError,
    task: &Map<String, Value>,
    defaults: Option<&Map<String, Value>>,
    index: usize,
) -> ValidationError {
    let inherited = match (&err.field, defaults) {
        (Some(field), Some(defaults)) => !has_path(task, field) && has_path(defaults, field),
        _ => false,
    };
    if inherited {
        err.under("defaults")
    } else {
        err.under(&format!("tasks[{index}]"))
    }
}

/// Whether `object` holds a value at a field path like `actions[1].ms`.
fn has_path(object: &Map<String, Value>, path: &str) -> bool {
    let pointer: String =
        path.split('.').flat_map(|part| part.split('[')).map(|segment| format!("/{}", segment.trim_end_matches(']'))).collect();
    let mut segments = pointer.splitn(3, '/').skip(1);
    let Some(first) = segments.next() else { return false };
    let Some(value) = object.get(first) else { return false };
    match segments.next() {
        Some(rest) => value.pointer(&format!("/{rest}")).is_some(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn specs(tasks: Value, defaults: Value) -> Result<Vec<TaskSpec>, ValidationError> {
        let tasks = tasks.as_array().expect("tasks").clone();
        batch_specs(&tasks, defaults.as_object(), Pipeline::Scripted)
    }

    #[test]
    fn task_fields_win_over_defaults_and_objects_merge() {
        let got = specs(
            json!([{"prompt": "one"}, {"prompt": "two", "priority": "high", "metadata": {"row": 2}, "model": null}]),
            json!({"pipeline": "openai-cua", "priority": "low", "model": "m", "metadata": {"project": "p"}}),
        )
        .expect("valid");
        assert_eq!(got[0].prompt, "one");
        assert_eq!(got[0].priority(), flotilla_types::task::Priority::Low);
        assert_eq!(got[0].model.as_deref(), Some("m"));
        assert_eq!(got[1].priority(), flotilla_types::task::Priority::High);
        assert_eq!(got[1].model, None, "null removes a default");
        assert_eq!(got[1].metadata.as_ref().map(|m| m.len()), Some(2), "objects merge key by key");
        assert_eq!(got[1].pipeline, Some(Pipeline::OpenaiCua));
    }

    /// A task is a merge patch with or without `defaults`: a `null` (at the
    /// top or in a nested object) removes its key either way, so the same
    /// task is read alike with no `defaults` and with `{}`.
    #[test]
    fn a_task_is_a_patch_without_defaults_too() {
        let task = json!([{"prompt": "p", "pipeline": "claude-code", "files": {"a.txt": "x", "b.txt": null},
            "metadata": {"k": null, "l": 1}, "colour": null}]);
        for defaults in [json!(null), json!({})] {
            let got = specs(task.clone(), defaults.clone()).expect("valid");
            assert_eq!(
                got[0].files,
                Some(flotilla_types::task::TaskFiles::Inline([("a.txt".to_owned(), "x".to_owned())].into())),
                "{defaults}"
            );
            assert_eq!(got[0].metadata, Some(json!({"l": 1}).as_object().cloned().expect("object")), "{defaults}");
        }
    }

    #[test]
    fn a_bad_task_is_named_by_its_index() {
        let tasks = json!([{"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"}, {"prompt": ""}]);
        let err = specs(tasks, json!({"pipeline": "openai-cua"})).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("tasks[3].prompt"));
        let cua = json!({"pipeline": "openai-cua"});
        let err = specs(json!([{"prompt": "a"}, {"prompt": "b", "colour": "red"}]), cua.clone()).expect_err("refused");
        assert!(err.field.as_deref().is_some_and(|f| f.starts_with("tasks[1]")), "{err:?}");
        assert!(err.message.contains("colour"), "{err:?}");
        let err = specs(json!([{"prompt": "a"}, 5]), cua).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("tasks[1]"));
        let err = specs(
            json!([{"prompt": "a", "pipeline": "scripted", "actions": [{"type": "wait", "ms": 1}, {"type": "wait", "ms": -1}]}]),
            json!(null),
        )
        .expect_err("refused");
        assert!(err.field.as_deref().is_some_and(|f| f.starts_with("tasks[0].actions[1]")), "{err:?}");
    }

    #[test]
    fn an_inherited_bad_value_is_named_in_the_defaults() {
        let err = specs(json!([{"prompt": "a"}]), json!({"sandbox": {"resolution": [1, 1]}})).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("defaults.sandbox.resolution"));
        let err = specs(json!([{"prompt": "a", "sandbox": {"resolution": [1, 1]}}]), json!({"sandbox": {"provider": "local"}}))
            .expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("tasks[0].sandbox.resolution"));
    }

    #[test]
    fn idempotency_keys_and_empty_or_huge_batches_are_refused() {
        let err = specs(json!([{"prompt": "a", "idempotency_key": "k"}]), json!(null)).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("tasks[0].idempotency_key"));
        let err = specs(json!([{"prompt": "a"}]), json!({"prompt": {}})).expect_err("a default is a value of its field");
        assert_eq!(err.field.as_deref(), Some("defaults.prompt"));
        let err = specs(json!([{"prompt": "a", "max_steps": 3}]), json!({"max_steps": 0})).expect_err("within its bounds");
        assert_eq!(err.field.as_deref(), Some("defaults.max_steps"));
        let err = specs(json!([{"prompt": "a"}]), json!({"idempotency_key": "k"})).expect_err("refused");
        assert_eq!(err.field.as_deref(), Some("defaults.idempotency_key"));
        assert_eq!(specs(json!([]), json!(null)).expect_err("refused").field.as_deref(), Some("tasks"));
        let many: Vec<Value> = (0..=MAX_BATCH_TASKS).map(|_| json!({"prompt": "x"})).collect();
        assert!(batch_specs(&many, None, Pipeline::Scripted).is_err());
    }

    #[test]
    fn paths_are_found_in_nested_values() {
        let object = json!({"actions": [{"ms": 1}, {"ms": 2}], "sandbox": {"resolution": [1, 1]}});
        let object = object.as_object().expect("object");
        assert!(has_path(object, "actions[1].ms"));
        assert!(has_path(object, "sandbox.resolution"));
        assert!(has_path(object, "sandbox"));
        assert!(!has_path(object, "actions[2].ms"));
        assert!(!has_path(object, "prompt"));
    }
}
