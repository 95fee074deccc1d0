//! A cursor over a model's JSON answer that remembers where it is, so a
//! field that is missing or has the wrong type is reported by its path
//! (`output[1].action.x is missing`) rather than by a bare parse error.

use serde_json::Value;

use crate::model::ModelError;
use crate::provider_http::excerpt;

/// A value inside an answer and the path that leads to it.
#[derive(Debug, Clone)]
pub(super) struct At<'a> {
    value: &'a Value,
    path: String,
}

impl<'a> At<'a> {
    /// The whole answer; its fields are named without a leading dot.
    pub(super) fn root(value: &'a Value) -> Self {
        Self { value, path: String::new() }
    }

    pub(super) fn path(&self) -> &str {
        &self.path
    }

    /// The field `name`, or `None` when it is absent or `null`.
    pub(super) fn get(&self, name: &str) -> Option<At<'a>> {
        match self.value.get(name) {
            None | Some(Value::Null) => None,
            Some(value) => Some(At { value, path: self.child_path(name) }),
        }
    }

    /// The field `name`, which must be there.
    pub(super) fn field(&self, name: &str) -> Result<At<'a>, ModelError> {
        self.get(name).ok_or_else(|| ModelError::Malformed(format!("{} is missing", self.child_path(name))))
    }

    /// The elements of a list, each with its index in the path.
    pub(super) fn items(&self) -> Result<Vec<At<'a>>, ModelError> {
        let list = self.value.as_array().ok_or_else(|| self.wrong("is not a list"))?;
        Ok(list.iter().enumerate().map(|(i, value)| At { value, path: format!("{}[{i}]", self.path) }).collect())
    }

    pub(super) fn str(&self) -> Result<&'a str, ModelError> {
        self.value.as_str().ok_or_else(|| self.wrong("is not a string"))
    }

    /// A whole number; an integral float such as `12.0` counts as one.
    pub(super) fn int(&self) -> Result<i64, ModelError> {
        let integral_float = self.value.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15).map(|f| f as i64);
        self.value.as_i64().or(integral_float).ok_or_else(|| self.wrong("is not a whole number"))
    }

    /// A whole number that is at least zero.
    pub(super) fn count(&self) -> Result<u64, ModelError> {
        u64::try_from(self.int()?).map_err(|_| self.wrong("is negative"))
    }

    /// A screen coordinate: a whole number from zero up.
    pub(super) fn coordinate(&self) -> Result<u32, ModelError> {
        u32::try_from(self.int()?).map_err(|_| self.wrong("is not a coordinate on the screen"))
    }

    /// A malformed-answer error about this value: `"{path} {problem}: {value}"`.
    pub(super) fn wrong(&self, problem: &str) -> ModelError {
        ModelError::Malformed(format!("{} {problem}: {}", self.path, excerpt(&self.value.to_string())))
    }

    fn child_path(&self, name: &str) -> String {
        if self.path.is_empty() {
            name.to_owned()
        } else {
            format!("{}.{name}", self.path)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message(error: ModelError) -> String {
        match error {
            ModelError::Malformed(message) => message,
            other => panic!("expected a malformed answer, got {other:?}"),
        }
    }

    #[test]
    fn paths_name_the_field_that_is_wrong() {
        let answer = json!({"output": [{"type": "x"}, {"action": {"x": "ten", "y": -3}}]});
        let root = At::root(&answer);
        let items = root.field("output").and_then(|o| o.items()).expect("a list");
        let action = items[1].field("action").expect("an action");
        assert_eq!(
            message(action.field("x").and_then(|x| x.coordinate()).expect_err("malformed")),
            "output[1].action.x is not a whole number: \"ten\""
        );
        assert_eq!(
            message(action.field("y").and_then(|y| y.coordinate()).expect_err("malformed")),
            "output[1].action.y is not a coordinate on the screen: -3"
        );
        assert_eq!(message(action.field("button").expect_err("malformed")), "output[1].action.button is missing");
        assert_eq!(message(root.field("id").expect_err("malformed")), "id is missing");
        assert_eq!(
            message(items[0].field("type").and_then(|t| t.items()).expect_err("malformed")),
            "output[0].type is not a list: \"x\""
        );
    }

    #[test]
    fn null_counts_as_absent_and_integral_floats_as_numbers() {
        let answer = json!({"a": null, "b": 12.0, "c": 1.5});
        let root = At::root(&answer);
        assert!(root.get("a").is_none());
        assert_eq!(root.field("b").and_then(|b| b.int()).expect("integral"), 12);
        assert!(root.field("c").and_then(|c| c.int()).is_err());
    }
}
