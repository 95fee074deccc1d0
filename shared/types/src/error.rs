//! Validation errors: input that breaks the task model's rules, with the
//! field that broke them. The API alone decides which HTTP status each
//! becomes.

/// Input that breaks the task model's rules.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    pub message: String,
    /// The JSON path of the offending field, like `sandbox.resolution`.
    pub field: Option<String>,
}

impl ValidationError {
    pub fn new(message: impl Into<String>) -> Self {
        Self { message: message.into(), field: None }
    }

    pub fn at(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self { message: message.into(), field: Some(field.into()) }
    }

    /// Places this error under a parent field: `resolution` becomes `sandbox.resolution`.
    pub fn under(mut self, parent: &str) -> Self {
        self.field = Some(match self.field {
            Some(child) if child.starts_with('[') => format!("{parent}{child}"),
            Some(child) => format!("{parent}.{child}"),
            None => parent.to_owned(),
        });
        self
    }
}
