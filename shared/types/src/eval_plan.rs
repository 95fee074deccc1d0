//! How an evaluation batch runs its suite: each task in each cell of a
//! model and pipeline `matrix`, `repeat` times independently, each time as
//! `best_of` runs of which the best counts; and where each run sits in
//! that plan.

use serde::{Deserialize, Serialize};

use crate::error::ValidationError;
use crate::ids::TaskId;
use crate::task::Pipeline;

/// The most runs `repeat` or `best_of` asks for.
pub const MAX_RUNS: u32 = 100;
/// The most values one matrix axis lists.
pub const MAX_MATRIX_VALUES: usize = 16;

/// The model and pipeline axes a batch is expanded over.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Matrix {
    /// Models: each task runs once with each (laid over its own `model`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 16))]
    pub model: Option<Vec<String>>,
    /// Pipelines: each task runs once with each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(min_items = 1, max_items = 16))]
    pub pipeline: Option<Vec<Pipeline>>,
}

/// A cell of the matrix: the model and pipeline laid over a task (`None`
/// keeps the task's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub model: Option<String>,
    pub pipeline: Option<Pipeline>,
}

impl Matrix {
    pub fn validate(&self) -> Result<(), ValidationError> {
        if let Some(models) = &self.model {
            if models.is_empty() || models.len() > MAX_MATRIX_VALUES {
                return Err(ValidationError::at("model", format!("1 to {MAX_MATRIX_VALUES} models")));
            }
            for (i, model) in models.iter().enumerate() {
                crate::task::check_model(&format!("model[{i}]"), model)?;
            }
        }
        if let Some(pipelines) = &self.pipeline {
            if pipelines.is_empty() || pipelines.len() > MAX_MATRIX_VALUES {
                return Err(ValidationError::at("pipeline", format!("1 to {MAX_MATRIX_VALUES} pipelines")));
            }
        }
        Ok(())
    }

    /// Every cell, pipelines outermost, in the order given.
    pub fn cells(&self) -> Vec<Cell> {
        let models: Vec<Option<String>> = match &self.model {
            Some(models) => models.iter().cloned().map(Some).collect(),
            None => vec![None],
        };
        let pipelines: Vec<Option<Pipeline>> = match &self.pipeline {
            Some(pipelines) => pipelines.iter().copied().map(Some).collect(),
            None => vec![None],
        };
        pipelines
            .iter()
            .flat_map(|pipeline| models.iter().map(move |model| Cell { model: model.clone(), pipeline: *pipeline }))
            .collect()
    }
}

/// How a batch runs its tasks: each task of the suite, in each matrix
/// cell, `repeat` times independently, each time as `best_of` runs of
/// which the best counts.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RunPlan {
    pub repeat: u32,
    pub best_of: u32,
    pub stop_on_pass: bool,
    pub matrix: Matrix,
}

impl RunPlan {
    /// Whether the plan runs every task once, as a plain batch does.
    pub fn is_plain(&self) -> bool {
        self.repeat <= 1 && self.best_of <= 1 && self.matrix.model.is_none() && self.matrix.pipeline.is_none()
    }

    /// How many runs each task of the suite makes.
    pub fn runs_per_task(&self) -> usize {
        self.matrix.cells().len() * self.repeat.max(1) as usize * self.best_of.max(1) as usize
    }
}

/// Where one run (one task of a batch) sits in its batch's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPlace {
    /// The task of the suite it runs, counted from 0 in the order given.
    pub task: u32,
    /// Its matrix cell, counted from 0.
    pub cell: u32,
    /// Which of the task's runs in its cell it is, counted from 1.
    pub run: u32,
    /// Its best-of group within the cell, counted from 0: the runs of one
    /// group compete, the best counts.
    pub group: u32,
    /// With `stop_on_pass`, the other runs of its group: cancelled once
    /// this one passes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rivals: Vec<TaskId>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matrix_lists_every_cell_and_a_plan_counts_its_runs() {
        let matrix = Matrix { model: Some(vec!["a".into(), "b".into()]), pipeline: Some(vec![Pipeline::Scripted]) };
        assert_eq!(matrix.cells().len(), 2);
        assert_eq!(Matrix::default().cells(), vec![Cell { model: None, pipeline: None }]);
        let plan = RunPlan { repeat: 3, best_of: 2, stop_on_pass: true, matrix };
        assert_eq!(plan.runs_per_task(), 12);
        assert!(!plan.is_plain());
        assert!(RunPlan::default().is_plain());
    }
}
