//! The body of `POST /v1/batches`, stated exactly. Each task is laid over
//! `defaults` as a JSON merge patch (RFC 7386) and the merged spec must be
//! one `POST /v1/tasks` takes, so whether a task is valid depends on what
//! `defaults` holds. The schema says so by branching on it: `defaults` is in
//! one of a few states (which pipeline group a task inherits, which of
//! `actions`/`replay_of`/`continue_task` it gives, whether it gives
//! `prompt` and `retry`), and each state lists the tasks that merge with it
//! into a valid spec.
//!
//! Three aspects of the merge are independent of each other, so the body is
//! an `allOf` of one `oneOf` per aspect (one branch per state of `defaults`;
//! every `oneOf` here is of disjoint branches, which generators take whole
//! where an `anyOf` of as many would be intersected branch by branch):
//! - the pipeline and the fields that depend on it: a task's merged pipeline
//!   is its own, the server's default when it gives `null`, else the
//!   defaults'; a merged field is the task's when not `null`, gone when
//!   `null`, else the defaults';
//! - `prompt`: required in each task unless `defaults` gives one, never
//!   `null` in a task (that would remove it);
//! - `retry`: a task's `retry` object keeps the defaults' `max_attempts`
//!   unless it names its own, so without one in `defaults` it must name it.
//!
//! Everything else merges field by field: each value a task gives is
//! checked on its own (a key of a nested object too), `null` removes, and
//! what it does not name is the defaults' value, itself checked.
//!
//! Invariant: a body is valid by this schema exactly when the server's
//! `batch_specs` takes it (`batches::the_batch_schema_agrees_with_the_server`
//! checks sampled bodies against both).

use flotilla_types::task::Pipeline;
use serde_json::{json, Map, Value};

use super::{reference, Case, CASES, PIPELINE_FIELDS};

/// The JSON type a pipeline field has when given (not `null`).
fn given_type(field: &str) -> &'static str {
    match field {
        "actions" => "array",
        _ => "string",
    }
}

/// The pipeline groups a spec's pipeline falls in: those of `CASES`, once
/// each (`scripted` has two cases).
fn groups() -> Vec<&'static [Pipeline]> {
    let mut groups: Vec<&'static [Pipeline]> = Vec::new();
    for case in &CASES {
        if !groups.contains(&case.pipelines) {
            groups.push(case.pipelines);
        }
    }
    groups
}

/// What `defaults` holds, as far as the pipeline rules go: the group of the
/// pipeline a task inherits and which pipeline fields it gives.
struct Held {
    group: &'static [Pipeline],
    given: [bool; 3],
}

impl Held {
    /// Every state.
    fn all() -> Vec<Held> {
        let mut all = Vec::new();
        for group in groups() {
            for bits in 0..8u8 {
                all.push(Held { group, given: std::array::from_fn(|i| bits & (1 << i) != 0) });
            }
        }
        all
    }

    /// Whether a batch without `defaults` (or with `null`) is in this state.
    fn is_empty(&self, default: Pipeline) -> bool {
        self.group.contains(&default) && !self.given.contains(&true)
    }
}

/// The body schema: `BatchDefaults` and `BatchTaskPatch` (the fields' own
/// rules) and the merge rules over them.
pub(super) fn body(spec: &Value, schemas: &Map<String, Value>, default: Pipeline) -> [(&'static str, Value); 3] {
    let request = json!({
        "type": "object",
        "description": "1 to 10 000 tasks, each laid over `defaults` as a JSON merge patch (RFC 7386): its fields win, \
            objects merge key by key, `null` removes a key. Each merged spec must be one `POST /v1/tasks` takes (see \
            `TaskSubmission`), without `idempotency_key`; an error names the field as `tasks[i].field`, or \
            `defaults.field` for a bad value a task inherited. The `allOf` states the merge: a task's pipeline is its \
            own, this server's default pipeline when it gives `null`, else that of `defaults`; `actions` or \
            `replay_of` (one of them) with `scripted`, `continue_task` with `claude-code`, wherever \
            they come from; `prompt` in every task unless `defaults` gives it; a task's `retry` object names \
            `max_attempts` unless `defaults` gives `retry`; a merged `check` has a `command` or `actions`.",
        "additionalProperties": false,
        "required": ["tasks"],
        "properties": {
            "defaults": {"description": "Spec fields every task starts from.",
                "oneOf": [{"type": "null"}, reference("BatchDefaults")]},
            "tasks": {"type": "array", "minItems": 1, "maxItems": flotilla_queue::queue::MAX_BATCH_TASKS,
                "items": reference("BatchTaskPatch")},
            "repeat": {"description": "Runs each task this many times, independently, each in its own sandbox \
                (default 1). Tasks × matrix cells × `repeat` × `best_of` is at most 10 000.",
                "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 1, "maximum": flotilla_types::eval_plan::MAX_RUNS}]},
            "best_of": {"description": "Runs each task (each repeat) this many times; its best run by the check's \
                score counts (default 1).",
                "oneOf": [{"type": "null"}, {"type": "integer", "minimum": 1, "maximum": flotilla_types::eval_plan::MAX_RUNS}]},
            "stop_on_pass": {"description": "With `best_of` of 2 or more: once one run of a group passes its check, \
                the group's other runs are cancelled.", "type": ["boolean", "null"]},
            "matrix": {"description": "Expands the batch over models and pipelines: each task runs once in each \
                combination, the matrix's `model` and `pipeline` laid over the task's own (the merged spec must suit \
                each pipeline).", "oneOf": [{"type": "null"}, reference("Matrix")]},
        },
        "allOf": [pipeline_rules(default), prompt_rule(), retry_rule(), check_rule(), stop_on_pass_rule()],
    });
    [("BatchRequest", request), ("BatchDefaults", defaults_fields(spec)), ("BatchTaskPatch", patch_fields(spec, schemas))]
}

/// A check object whose `command` is given (a string).
fn gives_command() -> Value {
    json!({"required": ["command"], "properties": {"command": {"type": "string"}}})
}

/// A check object whose `actions` are given and not empty.
fn gives_actions() -> Value {
    json!({"required": ["actions"], "properties": {"actions": {"type": "array", "minItems": 1}}})
}

/// `check`: each task's merged check has a command or actions. One branch
/// per state of the defaults' check (none, or which of the two it gives:
/// its own rules need one); a task's check object keeps each of the two it
/// does not name, and `null` drops the whole check.
fn check_rule() -> Value {
    let mut branches = vec![json!({
        "properties": {"defaults": {"properties": {"check": {"type": "null"}}},
            "tasks": {"items": {"properties": {"check": {"anyOf": [{"type": "null"}, gives_command(), gives_actions()]}}}}},
    })];
    for (command, actions) in [(true, false), (false, true), (true, true)] {
        let state = |given: bool, rule: Value| if given { rule } else { json!({"not": rule}) };
        let mut keeps = vec![json!({"type": "null"}), gives_command(), gives_actions()];
        if command {
            keeps.push(json!({"not": {"required": ["command"]}}));
        }
        if actions {
            keeps.push(json!({"not": {"required": ["actions"]}}));
        }
        branches.push(json!({
            "required": ["defaults"],
            "properties": {
                "defaults": {"type": "object", "required": ["check"], "properties": {"check": {"type": "object",
                    "allOf": [state(command, gives_command()), state(actions, gives_actions())]}}},
                "tasks": {"items": {"properties": {"check": {"anyOf": keeps}}}},
            },
        }));
    }
    json!({"oneOf": branches})
}

/// `stop_on_pass: true` needs `best_of` of 2 or more.
fn stop_on_pass_rule() -> Value {
    json!({"oneOf": [
        {"properties": {"stop_on_pass": {"enum": [false, null]}}},
        {"required": ["stop_on_pass", "best_of"],
            "properties": {"stop_on_pass": {"const": true}, "best_of": {"type": "integer", "minimum": 2}}},
    ]})
}

/// `defaults` field by field: any spec field with its own rules, none
/// required, `idempotency_key` only `null`.
fn defaults_fields(spec: &Value) -> Value {
    let mut fields = spec.clone();
    if let Some(object) = fields.as_object_mut() {
        object.remove("required");
        object.insert(
            "description".to_owned(),
            json!(
                "Spec fields every task of the batch starts from, each by its own rules (a task's merged spec \
                follows the rules between fields)."
            ),
        );
    }
    if let Some(properties) = fields.get_mut("properties").and_then(Value::as_object_mut) {
        properties.insert("idempotency_key".to_owned(), json!({"type": "null"}));
    }
    fields
}

/// One task as a merge patch, field by field: a value by its field's rules
/// or `null` (which removes it), except `prompt`, never `null`; any other key
/// only `null`; nested objects alike, key by key.
fn patch_fields(spec: &Value, schemas: &Map<String, Value>) -> Value {
    let mut fields = spec.clone();
    let Some(object) = fields.as_object_mut() else { return fields };
    object.remove("required");
    object.insert(
        "description".to_owned(),
        json!(
            "One task of a batch as a merge patch over `defaults`: each value by its field's rules, `null` removes \
            a key (any key, in nested objects too), `prompt` is never `null`."
        ),
    );
    object.insert("additionalProperties".to_owned(), json!({"type": "null"}));
    let Some(properties) = object.get_mut("properties").and_then(Value::as_object_mut) else { return fields };
    properties.insert("idempotency_key".to_owned(), json!({"type": "null"}));
    properties.insert("files".to_owned(), json!({"oneOf": [{"type": "null"}, files_patch()]}));
    let nested_objects = [("sandbox", "SandboxSpec"), ("retry", "RetryPolicy"), ("budget", "Budget"), ("check", "TaskCheck")];
    for (name, component) in nested_objects {
        let Some(mut nested) = schemas.get(component).cloned() else { continue };
        if let Some(nested) = nested.as_object_mut() {
            nested.remove("required");
            // What a merged object needs (a check's command or actions) is
            // a rule between the task and `defaults`: `check_rule`.
            nested.remove("anyOf");
            nested.remove("description");
            nested.insert("additionalProperties".to_owned(), json!({"type": "null"}));
        }
        properties.insert(name.to_owned(), json!({"oneOf": [{"type": "null"}, nested]}));
    }
    fields
}

/// A patch of input files: contents by relative path, or `null` (removes
/// that path, so any key may be `null`). Every merged object of relative
/// paths to strings is valid input files (`{"s3_prefix": …}` alone names a
/// prefix), so the defaults' files need nothing of the patch.
fn files_patch() -> Value {
    json!({
        "type": "object",
        "patternProperties": {"^(?:(?![\\s\\S])|/|(?:[\\s\\S]*/)?\\.\\.(?:/|(?![\\s\\S])))": {"type": "null"}},
        "additionalProperties": {"type": ["string", "null"]},
    })
}

/// The pipeline rules of the merged specs: without matrix pipelines, one
/// branch per state of `defaults`, each with the tasks that merge with it
/// into a valid spec; with them, one per set of matrix pipelines and the
/// pipeline fields `defaults` gives, each with the tasks whose merged
/// fields suit every pipeline of the matrix (a task's own pipeline is laid
/// over by the matrix's).
fn pipeline_rules(default: Pipeline) -> Value {
    let no_matrix = json!({"properties": {"matrix": {"properties": {"pipeline": {"type": "null"}}}}});
    let mut branches: Vec<Value> =
        Held::all().iter().map(|held| json!({"allOf": [no_matrix.clone(), pipeline_branch(held, default)]})).collect();
    branches.extend(matrix_sets().iter().map(|(pipelines, cases)| matrix_branch(pipelines, cases)));
    json!({"oneOf": branches})
}

/// The sets of matrix pipelines a merged spec can suit, as a schema of the
/// matrix's `pipeline`, with the cases its fields must be in: those of one
/// group, or `claude-code` mixed with computer-use pipelines (none of the
/// pipeline fields). A set with `scripted` and another pipeline suits no
/// spec.
fn matrix_sets() -> Vec<(Value, Vec<&'static Case>)> {
    let names = |pipelines: &[Pipeline]| -> Vec<Value> { pipelines.iter().map(|p| json!(p.as_str())).collect() };
    let mut sets: Vec<(Value, Vec<&'static Case>)> = groups()
        .into_iter()
        .map(|group| {
            let cases = CASES.iter().filter(|case| case.pipelines == group).collect();
            (json!({"items": {"enum": names(group)}}), cases)
        })
        .collect();
    let computer_use = &CASES[3];
    let mut mixed = names(CASES[2].pipelines);
    mixed.extend(names(computer_use.pipelines));
    let mixed = json!({"items": {"enum": mixed},
        "allOf": [{"not": {"items": {"enum": names(CASES[2].pipelines)}}}, {"not": {"items": {"enum": names(computer_use.pipelines)}}}]});
    sets.push((mixed, vec![computer_use]));
    sets
}

/// Matrix pipelines of one set and the tasks whose merged fields are in
/// one of `cases`: each pipeline field no case takes is gone from every
/// merged spec (on its own, field by field); the fields the cases tell
/// apart (`scripted`'s `actions` or `replay_of`) by what `defaults` gives.
fn matrix_branch(pipelines: &Value, cases: &[&Case]) -> Value {
    let mut matrix = pipelines.clone();
    matrix["type"] = json!("array");
    let taken = |field: &str| cases.iter().any(|case| case.takes.contains(&field));
    let mut rules: Vec<Value> =
        PIPELINE_FIELDS.iter().filter(|field| !taken(field)).map(|field| gone_after_merge(field)).collect();
    if cases.len() > 1 {
        let mut states = Vec::new();
        for bits in 0..4u8 {
            let given = [bits & 1 != 0, bits & 2 != 0, false];
            let (defaults, required) = defaults_give(given, 2, Map::new());
            let tasks: Vec<Value> = cases.iter().map(|case| case_fields(case, given, Map::new(), Vec::new())).collect();
            let mut state = json!({"properties": {"defaults": {"properties": defaults, "required": required},
                "tasks": {"items": {"oneOf": tasks}}}});
            if bits != 0 {
                state["required"] = json!(["defaults"]);
                state["properties"]["defaults"]["type"] = json!("object");
            }
            states.push(state);
        }
        rules.push(json!({"oneOf": states}));
    }
    json!({
        "required": ["matrix"],
        "properties": {"matrix": {"type": "object", "required": ["pipeline"], "properties": {"pipeline": matrix}}},
        "allOf": rules,
    })
}

/// `field` is in no merged spec: where `defaults` gives it, every task
/// removes it (`null`); where not, no task gives it.
fn gone_after_merge(field: &str) -> Value {
    json!({"oneOf": [
        {"required": ["defaults"], "properties": {
            "defaults": {"type": "object", "required": [field], "properties": {field: {"type": given_type(field)}}},
            "tasks": {"items": {"required": [field], "properties": {field: {"type": "null"}}}}}},
        {"properties": {
            "defaults": {"properties": {field: {"type": "null"}}},
            "tasks": {"items": {"properties": {field: {"type": "null"}}}}}},
    ]})
}

/// One state of `defaults` and the tasks that go with it.
fn pipeline_branch(held: &Held, default: Pipeline) -> Value {
    let inherits_default = held.group.contains(&default);
    let mut properties = Map::new();
    let mut required = Vec::new();
    let mut names: Vec<Value> = held.group.iter().map(|p| json!(p.as_str())).collect();
    if inherits_default {
        names.push(Value::Null);
    } else {
        required.push(json!("pipeline"));
    }
    properties.insert("pipeline".to_owned(), json!({"enum": names}));
    let (properties, given) = defaults_give(held.given, PIPELINE_FIELDS.len(), properties);
    required.extend(given);
    let empty = held.is_empty(default);
    let defaults = json!({"type": if empty { json!(["object", "null"]) } else { json!("object") },
        "properties": properties, "required": required});
    let tasks: Vec<Value> = CASES.iter().map(|case| task_case(case, held, default)).collect();
    let mut branch = json!({"properties": {"defaults": defaults, "tasks": {"items": {"oneOf": tasks}}}});
    if !empty {
        branch["required"] = json!(["defaults"]);
    }
    branch
}

/// The tasks whose merged spec over `held` is of `case`: the pipeline that
/// leads there (its own, `null` for the default, none to inherit), and
/// each pipeline field given, removed or left to inherit as the case needs.
fn task_case(case: &Case, held: &Held, default: Pipeline) -> Value {
    let mut names: Vec<Value> = case.pipelines.iter().map(|p| json!(p.as_str())).collect();
    if case.pipelines.contains(&default) {
        names.push(Value::Null);
    }
    let mut required = Vec::new();
    if held.group != case.pipelines {
        required.push(json!("pipeline"));
    }
    let mut properties = Map::new();
    properties.insert("pipeline".to_owned(), json!({"enum": names}));
    case_fields(case, held.given, properties, required)
}

/// What `defaults` holds of the first `count` pipeline fields, `given`
/// saying which it gives: each given one's type (and required), the others
/// `null` or absent; added to `properties`.
fn defaults_give(given: [bool; 3], count: usize, mut properties: Map<String, Value>) -> (Map<String, Value>, Vec<Value>) {
    let mut required = Vec::new();
    for (field, given) in PIPELINE_FIELDS.iter().zip(given).take(count) {
        properties.insert((*field).to_owned(), json!({"type": if given { given_type(field) } else { "null" }}));
        if given {
            required.push(json!(field));
        }
    }
    (properties, required)
}

/// Adds to a task's `properties` and `required` what its pipeline fields
/// must be for its merged spec to be of `case`, `defaults` giving the
/// fields `given`: each field given, removed or left to inherit.
fn case_fields(case: &Case, given: [bool; 3], mut properties: Map<String, Value>, mut required: Vec<Value>) -> Value {
    for (field, given) in PIPELINE_FIELDS.iter().zip(given) {
        let (schema, needed) = if case.needs.contains(field) {
            (json!({"type": given_type(field)}), !given)
        } else if case.takes.contains(field) {
            continue;
        } else {
            (json!({"type": "null"}), given)
        };
        properties.insert((*field).to_owned(), schema);
        if needed {
            required.push(json!(field));
        }
    }
    json!({"properties": properties, "required": required})
}

/// `prompt`: in `defaults`, or in every task.
fn prompt_rule() -> Value {
    json!({"oneOf": [
        {"required": ["defaults"], "properties": {"defaults": {"type": "object", "required": ["prompt"]}}},
        {"properties": {"defaults": {"properties": {"prompt": false}}, "tasks": {"items": {"required": ["prompt"]}}}},
    ]})
}

/// `retry`: given in `defaults`, or named whole (with `max_attempts`) by
/// each task that gives one.
fn retry_rule() -> Value {
    json!({"oneOf": [
        {"required": ["defaults"], "properties": {"defaults": {"type": "object", "required": ["retry"],
            "properties": {"retry": {"type": "object"}}}}},
        {"properties": {"defaults": {"properties": {"retry": {"type": "null"}}},
            "tasks": {"items": {"properties": {"retry": {"oneOf": [{"type": "null"}, {"type": "object", "required": ["max_attempts"]}]}}}}}},
    ]})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every state of `defaults` has its branch, and exactly one of them
    /// takes a batch without `defaults`.
    #[test]
    fn one_branch_per_state_and_one_for_no_defaults() {
        let rules = pipeline_rules(Pipeline::OpenaiCua);
        let all = rules["oneOf"].as_array().expect("branches");
        let needs_matrix = |b: &Value| b["required"].as_array().is_some_and(|r| r.contains(&json!("matrix")));
        let branches: Vec<&Value> = all.iter().filter(|b| !needs_matrix(b)).filter_map(|b| b["allOf"].get(1)).collect();
        assert_eq!(branches.len(), 3 * 8);
        let open: Vec<&&Value> = branches.iter().filter(|b| b.get("required").is_none()).collect();
        assert_eq!(open.len(), 1);
        assert_eq!(open[0]["properties"]["defaults"]["properties"]["pipeline"]["enum"].as_array().map(Vec::len), Some(5));
        let with_matrix = all.iter().filter(|b| needs_matrix(b)).count();
        assert_eq!(with_matrix, 4, "one for each set of matrix pipelines");
    }

    /// With `scripted` inherited and `actions` given by `defaults`, a task
    /// that keeps the pipeline may leave `actions` to inherit but must not
    /// add `replay_of` unless it removes `actions`.
    #[test]
    fn a_task_inherits_or_removes_what_defaults_give() {
        let held = Held { group: &[Pipeline::Scripted], given: [true, false, false] };
        let actions = task_case(&CASES[0], &held, Pipeline::OpenaiCua);
        assert_eq!(actions["required"], json!([]));
        assert_eq!(actions["properties"]["replay_of"], json!({"type": "null"}));
        let replay = task_case(&CASES[1], &held, Pipeline::OpenaiCua);
        assert_eq!(replay["required"], json!(["actions", "replay_of"]));
        assert_eq!(replay["properties"]["actions"], json!({"type": "null"}));
        let model = task_case(&CASES[3], &held, Pipeline::OpenaiCua);
        assert_eq!(model["required"], json!(["pipeline", "actions"]));
        assert_eq!(model["properties"]["pipeline"]["enum"].as_array().map(Vec::len), Some(5));
    }
}
