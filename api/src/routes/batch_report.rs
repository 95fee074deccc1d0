//! `GET /v1/batches/{id}/report`: an evaluation batch's report, computed
//! from what is stored in a few pipelined reads (the batch's task list, its
//! run plan, one `HMGET` per task), never a round trip per task. The plan a
//! batch submit carries is checked and expanded by the queue
//! (`flotilla_queue::queue::plan_batch`).

use axum::extract::State;
use axum::Json;
use flotilla_types::eval_report::{self, BatchReport};

use super::batches::BatchIdPath;
use crate::auth::Tenant;
use crate::error::{ApiError, ErrorBody};
use crate::state::AppState;

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
