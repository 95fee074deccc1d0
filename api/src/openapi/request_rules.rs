//! The rules of requests that the derived schemas do not carry, laid over
//! the rendered document so that it states exactly what the server accepts:
//! bounds and patterns the validators check (actions, sandbox, budget,
//! labels, input file paths, integer widths, usage days), which fields
//! each pipeline takes, and the envelope of an MCP message.
//!
//! A task spec is valid for one pipeline at a time: `actions` or
//! `replay_of` (one of them) only with `scripted`, `continue_task` only
//! with `claude-code` (`files` go with every pipeline). A spec without `pipeline` runs
//! on the configured default pipeline (`FLOTILLA_DEFAULT_PIPELINE`), so it
//! follows that pipeline's rules; the document is rendered for the server's
//! configuration and says which default it was rendered for. The request
//! schemas are a `oneOf` of one object per case, each closed
//! (`additionalProperties: false`) and told apart by `pipeline` and by which
//! of `actions`/`replay_of` is given.
//!
//! Invariant: every rule stated here is one a validator in `flotilla_types`
//! enforces with a 400, and the reverse; `schemathesis::*` checks the two
//! against each other.

use flotilla_types::eval::{MAX_COMMAND_CHARS, MAX_SETUP_FILES};
use flotilla_types::task::{Pipeline, MAX_ACTIONS, MAX_ATTEMPTS, MAX_DURATION_S, MAX_LABELS, MAX_LABEL_CHARS};
use serde_json::{json, Map, Value};

mod batch;

/// The spec fields whose use depends on the pipeline.
const PIPELINE_FIELDS: [&str; 3] = ["actions", "replay_of", "continue_task"];

/// One case of a spec: the pipelines it covers, the pipeline fields it
/// takes and those of them it needs.
struct Case {
    pipelines: &'static [Pipeline],
    takes: &'static [&'static str],
    needs: &'static [&'static str],
}

/// Every case, each pipeline's in turn.
const CASES: [Case; 4] = [
    Case { pipelines: &[Pipeline::Scripted], takes: &["actions"], needs: &["actions"] },
    Case { pipelines: &[Pipeline::Scripted], takes: &["replay_of"], needs: &["replay_of"] },
    Case { pipelines: &[Pipeline::ClaudeCode], takes: &["continue_task"], needs: &[] },
    Case {
        pipelines: &[Pipeline::OpenaiCua, Pipeline::ClaudeComputerUse, Pipeline::GeminiComputerUse, Pipeline::Browser],
        takes: &[],
        needs: &[],
    },
];

/// Lays the request rules over `doc`, for a server whose default pipeline
/// is `default`, for a caller who may name the sandbox templates
/// `templates` (`None`: a caller not known, on a server where some tenant
/// has templates).
pub fn apply(doc: &mut Value, default: Pipeline, templates: Option<&[String]>) {
    integer_widths(doc);
    let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) else { return };
    if let Some(action) = schemas.get_mut("Action") {
        action_rules(action);
    }
    if let Some(sandbox) = schemas.get_mut("SandboxSpec") {
        sandbox_rules(sandbox, templates);
    }
    if let Some(budget) = schemas.get_mut("Budget") {
        set(budget, "/properties/max_tokens", json!({"minimum": 1}));
        set(budget, "/properties/max_sandbox_s", json!({"minimum": 1, "maximum": MAX_DURATION_S * u64::from(MAX_ATTEMPTS)}));
        set(budget, "/properties/max_cost_usd", json!({"minimum": 0.000001, "maximum": flotilla_types::cost::MAX_USD}));
    }
    if let Some(files) = schemas.get_mut("TaskFiles") {
        *files = task_files();
    }
    if let Some(setup) = schemas.get_mut("TaskSetup") {
        let path = "^(?!(?:[\\s\\S]*/)?\\.\\.(?:/|(?![\\s\\S])))[^\\x00-\\x1f\\x7f-\\x9f]{1,1024}(?![\\s\\S])";
        set(setup, "/properties/files", json!({"maxProperties": MAX_SETUP_FILES, "propertyNames": {"pattern": path}}));
        set(setup, "/properties/commands", json!({"items": command()}));
    }
    if let Some(matrix) = schemas.get_mut("Matrix") {
        let mut model = printable(128);
        model["type"] = json!("string");
        set(matrix, "/properties/model", json!({"items": model}));
    }
    if let Some(check) = schemas.get_mut("TaskCheck") {
        let mut given_or_null = command();
        given_or_null["type"] = json!(["string", "null"]);
        set(check, "/properties/command", given_or_null);
        if let Some(check) = check.as_object_mut() {
            let needs = json!([
                {"required": ["command"], "properties": {"command": {"type": "string"}}},
                {"required": ["actions"], "properties": {"actions": {"type": "array", "minItems": 1}}},
            ]);
            check.insert("anyOf".to_owned(), needs);
        }
    }
    if let Some(spec) = schemas.get_mut("TaskSpec") {
        set(spec, "/properties/requires", json!({"maxItems": MAX_LABELS, "items": label()}));
        set(spec, "/properties/actions", json!({"maxItems": MAX_ACTIONS}));
    }
    let Some(spec) = schemas.get("TaskSpec").cloned() else { return };
    schemas.insert("TaskSubmission".to_owned(), submission(&spec, default, &[], "A task spec as `POST /v1/tasks` takes it."));
    schemas.insert(
        "ScheduledTask".to_owned(),
        submission(
            &spec,
            default,
            &["idempotency_key", "not_before"],
            "A task spec as a schedule takes it: each run gets its own idempotency key and starts when it is due.",
        ),
    );
    set(doc, "/paths/~1v1~1tasks/post/requestBody/content/application~1json/schema", reference("TaskSubmission"));
    if let Some(schemas) = doc.pointer_mut("/components/schemas").and_then(Value::as_object_mut) {
        for (name, schema) in batch::body(&spec, schemas, default) {
            schemas.insert(name.to_owned(), schema);
        }
    }
    set(doc, "/paths/~1v1~1batches/post/requestBody/content/application~1json", json!({"examples": batch_examples()}));
    usage_parameters(doc);
    set(doc, "/paths/~1mcp/post/requestBody/content/application~1json/schema", flotilla_mcp::message_schema());
    set(doc, "/components/schemas/NewSchedule/properties/task", reference("ScheduledTask"));
}

/// Batches the server takes, each showing one way of splitting specs
/// between `defaults` and the tasks (`batches::the_documents_batch_examples_are_each_accepted`
/// sends them).
fn batch_examples() -> Value {
    let wait = json!([{"type": "wait", "ms": 1}]);
    json!({
        "defaults": {"summary": "Shared fields in defaults, the prompt per task", "value": {
            "defaults": {"pipeline": "scripted", "actions": wait, "retry": {"max_attempts": 2}, "metadata": {"team": "ops"}},
            "tasks": [{"prompt": "row 1"}, {"prompt": "row 2", "retry": {"max_attempts": 3}}]}},
        "removed": {"summary": "A task removes a default with null and runs on another pipeline", "value": {
            "defaults": {"prompt": "the same prompt", "pipeline": "scripted", "actions": wait},
            "tasks": [{}, {"pipeline": "openai-cua", "actions": null, "not_before": "2999-01-01T00:00:00Z"}]}},
        "merged": {"summary": "Nested objects merge key by key", "value": {
            "defaults": {"pipeline": "scripted", "actions": wait, "budget": {"max_tokens": 100000}},
            "tasks": [{"prompt": "row 1", "budget": {"max_sandbox_s": 600}}, {"prompt": "row 2", "budget": {"max_tokens": null}}]}},
        "plain": {"summary": "Whole specs, no defaults", "value": {
            "tasks": [{"prompt": "alone", "pipeline": "scripted", "actions": wait, "max_steps": 5}]}}
    })
}

/// `GET /v1/usage`'s days (a date, or a date-time on it) and its one
/// grouping.
fn usage_parameters(doc: &mut Value) {
    let Some(parameters) = doc.pointer_mut("/paths/~1v1~1usage/get/parameters").and_then(Value::as_array_mut) else { return };
    for parameter in parameters {
        parameter["schema"] = match parameter["name"].as_str() {
            Some("from" | "to") => {
                json!({"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]})
            }
            Some("group_by") => json!({"type": "string", "enum": ["day"]}),
            _ => continue,
        };
    }
}

/// `{"$ref": …}` to a component schema.
fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// Merges the keys of `with` into the object at `pointer` (replacing it when
/// it is not an object, e.g. a `$ref` to be replaced).
fn set(doc: &mut Value, pointer: &str, with: Value) {
    let Some(target) = doc.pointer_mut(pointer) else { return };
    match (target.as_object_mut(), with) {
        (Some(object), Value::Object(keys)) if !object.contains_key("$ref") => object.extend(keys),
        (_, with) => *target = with,
    }
}

/// A set-up or check command: 1 to 10 000 characters, not only white
/// space (Unicode's `White_Space`), no NUL.
fn command() -> Value {
    json!({"type": "string", "minLength": 1, "maxLength": MAX_COMMAND_CHARS,
        "pattern": "^[^\\x00]*[^\\x00\\t\\n\\x0B\\x0C\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000][^\\x00]*(?![\\s\\S])"})
}

/// A free label: 1 to 64 of `A-Z a-z 0-9 - _ .`.
fn label() -> Value {
    json!({"type": "string", "pattern": format!("^[A-Za-z0-9._-]{{1,{MAX_LABEL_CHARS}}}(?![\\s\\S])")})
}

/// A string of 1 to `max` characters, none of them a control character.
fn printable(max: usize) -> Value {
    json!({"minLength": 1, "maxLength": max, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+(?![\\s\\S])"})
}

/// The range of a Rust integer, for every integer the document gives a
/// width (`int32`/`int64`) but no bound: unsigned when its minimum is 0.
fn integer_widths(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if let Some(range) = width_range(map) {
                for (key, bound) in ["minimum", "maximum"].into_iter().zip(range) {
                    map.entry(key).or_insert(bound);
                }
            }
            map.values_mut().for_each(integer_widths);
        }
        Value::Array(items) => items.iter_mut().for_each(integer_widths),
        _ => {}
    }
}

/// The bounds of an integer schema's width, if it has one.
fn width_range(map: &Map<String, Value>) -> Option<[Value; 2]> {
    let integer = match map.get("type") {
        Some(Value::String(t)) => t == "integer",
        Some(Value::Array(types)) => types.iter().any(|t| t == "integer"),
        _ => false,
    };
    let unsigned = map.get("minimum").and_then(Value::as_i64).is_some_and(|m| m >= 0);
    match (integer, map.get("format").and_then(Value::as_str), unsigned) {
        (true, Some("int32"), true) => Some([json!(0), json!(u32::MAX)]),
        (true, Some("int32"), false) => Some([json!(i32::MIN), json!(i32::MAX)]),
        (true, Some("int64"), true) => Some([json!(0), json!(u64::MAX)]),
        (true, Some("int64"), false) => Some([json!(i64::MIN), json!(i64::MAX)]),
        _ => None,
    }
}

/// An action's limits (`Action::validate`) and its closed field set.
fn action_rules(action: &mut Value) {
    let coordinate = json!({"minimum": 0, "maximum": 16_384});
    let keys = json!({"type": "array", "minItems": 1, "maxItems": 8,
        "items": {"type": "string", "pattern": "^[!-~]{1,32}(?![\\s\\S])"}});
    let Some(variants) = action.get_mut("oneOf").and_then(Value::as_array_mut) else { return };
    for variant in variants {
        variant["additionalProperties"] = json!(false);
        for field in ["x", "y"] {
            set(variant, &format!("/properties/{field}"), coordinate.clone());
        }
        set(variant, "/properties/text", json!({"minLength": 1, "maxLength": 20_000}));
        set(variant, "/properties/ms", json!({"maximum": 600_000}));
        // A confirmation's message: 1 to 1 000 characters, not only white
        // space (Unicode's `White_Space`, as `str::trim` reads it).
        set(
            variant,
            "/properties/message",
            json!({"minLength": 1, "maxLength": 1_000,
                "pattern": "[^\\t\\n\\x0B\\x0C\\r \\x85\\xA0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]"}),
        );
        if variant.pointer("/properties/keys").is_some() {
            set(variant, "/properties/keys", keys.clone());
        }
        if variant.pointer("/properties/path").is_some() {
            let point = json!({"type": "array", "minItems": 2, "maxItems": 2,
                "items": {"type": "integer", "minimum": 0, "maximum": 16_384}});
            set(variant, "/properties/path", json!({"type": "array", "minItems": 2, "maxItems": 1000, "items": point}));
        }
    }
}

/// A sandbox's limits (`validate_sandbox`), and the templates a tenant may
/// name (its `sandbox_templates`: the caller's own, never another tenant's).
fn sandbox_rules(sandbox: &mut Value, templates: Option<&[String]>) {
    set(
        sandbox,
        "/properties/resolution",
        json!({"type": ["array", "null"], "minItems": 2, "maxItems": 2,
            "prefixItems": [
                {"type": "integer", "minimum": 320, "maximum": 7680},
                {"type": "integer", "minimum": 200, "maximum": 4320}],
            "items": false,
            "description": "`[width, height]`, from 320x200 to 7680x4320"}),
    );
    let template = match templates {
        Some([]) => json!({"type": "null", "description": "The calling tenant has no sandbox templates (`sandbox_templates`)"}),
        Some(templates) => {
            let mut names: Vec<Value> = templates.iter().map(|t| json!(t)).collect();
            names.push(Value::Null);
            json!({"type": ["string", "null"], "enum": names,
                "description": "One of the calling tenant's `sandbox_templates`"})
        }
        None => json!({"type": ["string", "null"], "description": "One of the calling tenant's `sandbox_templates`: \
            `GET /openapi.json` with the tenant's key lists them"}),
    };
    if let Some(property) = sandbox.pointer_mut("/properties/template") {
        *property = template;
    }
    set(sandbox, "/properties/id", printable(128));
    set(sandbox, "/properties/url", json!({"maxLength": 2048, "pattern": "^https?://"}));
    set(sandbox, "/properties/timeout_s", json!({"minimum": 10, "maximum": 86_400}));
}

/// A task's input files: a prefix in S3 (`s3_prefix` alone), or
/// inline contents by relative path (not empty, not absolute, no `..` part).
fn task_files() -> Value {
    json!({
        "description": "Input files placed in the sandbox before the agent starts (in the home directory; a claude-code task's in its work directory): inline contents by relative path, or a prefix in S3 (an object whose one key is `s3_prefix`; with other keys it is inline contents).",
        "anyOf": [
            {"type": "object", "required": ["s3_prefix"], "properties": {"s3_prefix": {"type": "string"}},
             "additionalProperties": false},
            {"type": "object", "additionalProperties": {"type": "string"},
             "propertyNames": {"pattern": "^(?!/)(?!(?:[\\s\\S]*/)?\\.\\.(?:/|(?![\\s\\S])))[\\s\\S]"}},
        ],
    })
}

/// The `oneOf` a submitted spec is one of, `absent` fields aside.
fn submission(spec: &Value, default: Pipeline, absent: &[&str], description: &str) -> Value {
    let mut cases: Vec<Value> = CASES.iter().map(|case| case_schema(spec, case, None, absent)).collect();
    cases.extend(
        CASES.iter().filter(|case| case.pipelines.contains(&default)).map(|case| case_schema(spec, case, Some(default), absent)),
    );
    let description = format!(
        "{description} Which fields a spec takes depends on its pipeline: `actions` or `replay_of` (one of them) with \
         `scripted`, `continue_task` with `claude-code`. Without `pipeline` it runs on this server's default \
         pipeline, `{}`, and follows its rules.",
        default.as_str()
    );
    json!({"description": description, "oneOf": cases})
}

/// One case's closed object: `defaulted` is the default pipeline when the
/// case is that of a spec without `pipeline`.
fn case_schema(spec: &Value, case: &Case, defaulted: Option<Pipeline>, absent: &[&str]) -> Value {
    let mut schema = spec.clone();
    if let Some(object) = schema.as_object_mut() {
        object.remove("description");
    }
    let mut required = vec![json!("prompt")];
    let pipeline = match defaulted {
        Some(_) => json!({"type": "null"}),
        None => {
            required.push(json!("pipeline"));
            json!({"type": "string", "enum": case.pipelines.iter().map(|p| p.as_str()).collect::<Vec<_>>()})
        }
    };
    let Some(properties) = schema.get_mut("properties").and_then(Value::as_object_mut) else { return schema };
    properties.insert("pipeline".to_owned(), pipeline);
    for field in PIPELINE_FIELDS.iter().chain(absent) {
        if !case.takes.contains(field) {
            properties.insert((*field).to_owned(), json!({"type": "null"}));
        }
    }
    for field in case.needs {
        if let Some(property) = properties.get_mut(*field) {
            *property = not_null(property.take());
        }
        required.push(json!(field));
    }
    schema["required"] = Value::Array(required);
    schema
}

/// A nullable property's schema without `null`.
fn not_null(mut property: Value) -> Value {
    if let Some(Value::Array(types)) = property.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            property["type"] = only.clone();
        }
        return property;
    }
    match property.get("oneOf").and_then(Value::as_array) {
        Some(options) => {
            let mut rest = options.iter().filter(|o| o.get("type").is_none_or(|t| t != "null")).cloned();
            match (rest.next(), rest.next()) {
                (Some(only), None) => only,
                _ => property,
            }
        }
        None => property,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Value {
        json!({"type": "object", "required": ["prompt"], "additionalProperties": false, "properties": {
            "prompt": {"type": "string"},
            "pipeline": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/Pipeline"}]},
            "actions": {"type": ["array", "null"], "items": {}},
            "replay_of": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/TaskId"}]},
            "files": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/TaskFiles"}]},
            "continue_task": {"oneOf": [{"type": "null"}, {"$ref": "#/components/schemas/TaskId"}]},
            "idempotency_key": {"type": ["string", "null"]},
        }})
    }

    /// A spec without `pipeline` follows the default pipeline's rules: with
    /// `scripted` as the default it needs `actions` or `replay_of`, with a
    /// model pipeline it may have neither.
    #[test]
    fn a_spec_without_pipeline_follows_the_default() {
        let scripted = submission(&spec(), Pipeline::Scripted, &[], "");
        let cases = scripted["oneOf"].as_array().expect("cases");
        assert_eq!(cases.len(), 6);
        let defaulted: Vec<&Value> = cases.iter().filter(|c| c["properties"]["pipeline"] == json!({"type": "null"})).collect();
        assert_eq!(defaulted.len(), 2);
        assert_eq!(defaulted[0]["required"], json!(["prompt", "actions"]));
        assert_eq!(defaulted[0]["properties"]["actions"]["type"], "array");
        assert_eq!(defaulted[1]["required"], json!(["prompt", "replay_of"]));
        assert_eq!(defaulted[1]["properties"]["actions"], json!({"type": "null"}));
        let model = submission(&spec(), Pipeline::OpenaiCua, &[], "");
        let last = model["oneOf"].as_array().and_then(|c| c.last()).expect("a default case");
        assert_eq!(last["required"], json!(["prompt"]));
        for field in PIPELINE_FIELDS {
            assert_eq!(last["properties"][field], json!({"type": "null"}), "{field}");
        }
    }

    #[test]
    fn fields_a_schedule_sets_itself_are_null_only() {
        let schedule = submission(&spec(), Pipeline::OpenaiCua, &["idempotency_key"], "");
        for case in schedule["oneOf"].as_array().expect("cases") {
            assert_eq!(case["properties"]["idempotency_key"], json!({"type": "null"}));
        }
    }

    #[test]
    fn integers_get_the_range_of_their_width() {
        let mut doc = json!({"a": {"type": "integer", "format": "int32", "minimum": 0},
            "b": {"type": ["integer", "null"], "format": "int64"}, "c": {"type": "integer", "format": "int32", "minimum": 1, "maximum": 5}});
        integer_widths(&mut doc);
        assert_eq!(doc["a"]["maximum"], json!(u32::MAX));
        assert_eq!(doc["b"]["minimum"], json!(i64::MIN));
        assert_eq!(doc["c"]["maximum"], json!(5));
    }
}
