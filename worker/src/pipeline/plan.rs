//! What a `plan: true` task's plan is: the application and the ordered
//! steps the [`planner`](super::planner) made, with the questions it asked
//! on the way. Plain data, apart from the planner, so the step journal can
//! carry a plan without depending on how one is made.

use serde::{Deserialize, Serialize};

use crate::model::Usage;

/// A task split into steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub application: String,
    pub steps: Vec<String>,
}

/// A question the planner asked and the human's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Clarification {
    pub question: String,
    pub answer: String,
}

/// A plan, the clarifications it took, and the tokens planning used.
#[derive(Debug, Clone)]
pub struct Planned {
    pub plan: Plan,
    pub clarifications: Vec<Clarification>,
    pub usage: Usage,
}
