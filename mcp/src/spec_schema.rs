//! The input schema of `submit_task`: the task spec's own schema, as the
//! types crate derives it for the OpenAPI document, with the schemas it
//! refers to under `$defs` (JSON Schema's place for them) instead of the
//! document's `#/components/schemas/`. The API still checks every spec
//! (the served document adds the rules of each pipeline), so a tool call
//! with a spec the API refuses gets the API's 400.

use std::sync::{Arc, LazyLock};

use flotilla_types::task::TaskSpec;
use rmcp::model::JsonObject;
use serde_json::{Map, Value};
use utoipa::{PartialSchema, ToSchema};

const DOCUMENT_REFS: &str = "#/components/schemas/";
const SCHEMA_REFS: &str = "#/$defs/";

static TASK_SPEC: LazyLock<Arc<JsonObject>> = LazyLock::new(|| Arc::new(task_spec_schema()));

/// The task spec's JSON Schema (built once).
pub fn task_spec() -> Arc<JsonObject> {
    Arc::clone(&TASK_SPEC)
}

fn task_spec_schema() -> JsonObject {
    let mut referenced = Vec::new();
    <TaskSpec as ToSchema>::schemas(&mut referenced);
    let mut defs = Map::new();
    for (name, schema) in referenced {
        defs.insert(name, to_json(&schema));
    }
    let mut root = match to_json(&<TaskSpec as PartialSchema>::schema()) {
        Value::Object(root) => root,
        _ => Map::new(),
    };
    root.insert("type".to_owned(), Value::String("object".to_owned()));
    if !defs.is_empty() {
        root.insert("$defs".to_owned(), Value::Object(defs));
    }
    let mut schema = Value::Object(root);
    point_refs_at_defs(&mut schema);
    match schema {
        Value::Object(schema) => schema,
        _ => Map::new(),
    }
}

fn to_json(schema: &impl serde::Serialize) -> Value {
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// Rewrites every `$ref` into the OpenAPI document's components as one into `$defs`.
fn point_refs_at_defs(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields.iter_mut() {
                match field {
                    Value::String(target) if key == "$ref" => {
                        if let Some(name) = target.strip_prefix(DOCUMENT_REFS) {
                            *target = format!("{SCHEMA_REFS}{name}");
                        }
                    }
                    other => point_refs_at_defs(other),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(point_refs_at_defs),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `$ref` in `value`.
    fn refs(value: &Value, found: &mut Vec<String>) {
        match value {
            Value::Object(fields) => {
                for (key, field) in fields {
                    match field {
                        Value::String(target) if key == "$ref" => found.push(target.clone()),
                        other => refs(other, found),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|item| refs(item, found)),
            _ => {}
        }
    }

    #[test]
    fn the_schema_is_the_task_specs_with_every_reference_resolvable() {
        let schema = Value::Object(task_spec_schema());
        assert_eq!(schema["type"], "object");
        assert!(schema["properties"]["prompt"].is_object(), "{schema}");
        assert!(schema["required"].as_array().is_some_and(|r| r.contains(&Value::from("prompt"))), "{schema}");
        let mut found = Vec::new();
        refs(&schema, &mut found);
        assert!(!found.is_empty(), "the spec refers to its parts (actions, sandbox, …)");
        for target in found {
            let name = target.strip_prefix(SCHEMA_REFS).unwrap_or_else(|| panic!("{target} points into $defs"));
            assert!(schema["$defs"][name].is_object(), "{name} is defined");
        }
    }
}
