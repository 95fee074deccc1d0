//! Evaluation batches: the run plan a batch submit may carry (`repeat`,
//! `best_of`, `stop_on_pass`, `matrix`), expanded into the batch's tasks,
//! and `GET /v1/batches/{id}/report`, computed from what is stored in a
//! few pipelined reads (the batch's task list, its run plan, one `HMGET`
//! per task), never a round trip per task.

use std::borrow::Cow;

use axum::extract::State;
use axum::Json;
use flotilla_queue::queue::{expand_tasks, PlannedRuns, MAX_BATCH_TASKS};
use flotilla_types::eval::{RunPlan, MAX_RUNS};
use flotilla_types::eval_report::{self, BatchReport};
use flotilla_types::ValidationError;
use serde_json::Value;

use super::batches::{BatchIdPath, BatchRequest};
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

/// The run plan a batch asks for, checked; `None` for a plain batch.
fn run_plan(body: &BatchRequest) -> Result<Option<RunPlan>, ValidationError> {
    let count = |field: &str, value: Option<u32>| match value {
        Some(n) if !(1..=MAX_RUNS).contains(&n) => {
            Err(ValidationError::at(field, format!("{field} must be from 1 to {MAX_RUNS}")))
        }
        _ => Ok(value.unwrap_or(1)),
    };
    let plan = RunPlan {
        repeat: count("repeat", body.repeat)?,
        best_of: count("best_of", body.best_of)?,
        stop_on_pass: body.stop_on_pass.unwrap_or(false),
        matrix: body.matrix.clone().unwrap_or_default(),
    };
    plan.matrix.validate().map_err(|e| e.under("matrix"))?;
    if plan.stop_on_pass && plan.best_of < 2 {
        return Err(ValidationError::at("stop_on_pass", "stop_on_pass needs best_of of 2 or more"));
    }
    if plan.is_plain() {
        return Ok(None);
    }
    let runs = body.tasks.len().saturating_mul(plan.runs_per_task());
    if runs > MAX_BATCH_TASKS {
        return Err(ValidationError::at(
            "tasks",
            format!("the batch would run {runs} tasks (tasks × matrix cells × repeat × best_of); at most {MAX_BATCH_TASKS}"),
        ));
    }
    Ok(Some(plan))
}

/// The tasks a batch runs, expanded by its plan, and where each sits in
/// it; the tasks as given for a plain batch.
pub fn planned_tasks(body: &BatchRequest) -> Result<(Cow<'_, [Value]>, Option<PlannedRuns>), ValidationError> {
    match run_plan(body)? {
        None => Ok((Cow::Borrowed(&body.tasks), None)),
        Some(plan) => {
            let (tasks, places) = expand_tasks(&body.tasks, &plan);
            Ok((Cow::Owned(tasks), Some(PlannedRuns { plan, places })))
        }
    }
}

/// Names a bad expanded task by the task given: `tasks[7]` of the
/// expansion is `tasks[1]` when it runs the second task of the suite.
pub fn place_error(error: ValidationError, runs: Option<&PlannedRuns>) -> ValidationError {
    let (Some(runs), Some(field)) = (runs, error.field.as_deref()) else { return error };
    let Some(rest) = field.strip_prefix("tasks[") else { return error };
    let Some((index, tail)) = rest.split_once(']') else { return error };
    let Some(place) = index.parse::<usize>().ok().and_then(|i| runs.places.get(i)) else { return error };
    ValidationError { field: Some(format!("tasks[{}]{tail}", place.task)), ..error }
}

/// An evaluation batch's report.
#[utoipa::path(
    get,
    path = "/v1/batches/{id}/report",
    tag = "batches",
    params(("id" = flotilla_types::BatchId, Path, description = "Batch id, `bat_` and 26 characters")),
    responses(
        (status = 200, description = "Pass rate, mean score, pass@k, steps, time, tokens and cost per task and per success, by model and pipeline, and each suite task's runs", body = BatchReport),
        (status = 400, description = "Malformed id", body = ErrorBody),
        (status = 401, description = "Missing or unknown API key", body = ErrorBody),
        (status = 404, description = "No such batch for this tenant", body = ErrorBody),
        (status = 503, description = "Redis unreachable", body = ErrorBody),
    ),
    security(("bearer" = []))
)]
pub async fn report(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    BatchIdPath(id): BatchIdPath,
) -> Result<Json<BatchReport>, ApiError> {
    let reader = state.queue().reader();
    let batch = reader.batch(&tenant, &id).await?.ok_or(ApiError::NotFound("no such batch"))?;
    let ids = reader.batch_task_ids(&batch.id).await?;
    let (plan, places) = reader.batch_runs(&batch.id).await?;
    let rows = reader.run_rows(&tenant, &ids, &places).await?;
    Ok(Json(eval_report::report(id, &plan, &rows)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn body(value: Value) -> BatchRequest {
        serde_json::from_value(value).expect("body")
    }

    #[test]
    fn a_plain_batch_has_no_plan_and_bad_plans_name_their_field() {
        assert!(run_plan(&body(json!({"tasks": [{"prompt": "x"}]}))).expect("plain").is_none());
        let cases = [
            (json!({"tasks": [{"prompt": "x"}], "repeat": 0}), "repeat"),
            (json!({"tasks": [{"prompt": "x"}], "best_of": 101}), "best_of"),
            (json!({"tasks": [{"prompt": "x"}], "stop_on_pass": true}), "stop_on_pass"),
            (json!({"tasks": [{"prompt": "x"}], "matrix": {"model": []}}), "matrix.model"),
            (json!({"tasks": [{"prompt": "x"}], "repeat": 100, "best_of": 101}), "best_of"),
            (json!({"tasks": vec![json!({"prompt": "x"}); 200], "repeat": 100}), "tasks"),
        ];
        for (value, field) in cases {
            let err = run_plan(&body(value.clone())).expect_err("refused");
            assert_eq!(err.field.as_deref(), Some(field), "{value}");
        }
    }

    #[test]
    fn an_expanded_tasks_error_names_the_task_given() {
        let request = body(json!({"tasks": [{"prompt": "a"}, {"prompt": "b"}], "repeat": 3}));
        let (tasks, runs) = planned_tasks(&request).expect("planned");
        assert_eq!(tasks.len(), 6);
        let error = place_error(ValidationError::at("tasks[4].prompt", "bad"), runs.as_ref());
        assert_eq!(error.field.as_deref(), Some("tasks[1].prompt"));
    }
}
