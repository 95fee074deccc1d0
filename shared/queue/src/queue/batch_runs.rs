//! The run plan of an evaluation batch (`repeat`, `best_of`, `matrix`):
//! one hash beside the batch, under its hash tag, mapping each task id to
//! where it sits in the plan (suite task, matrix cell, run, best-of group,
//! and with `stop_on_pass` its group's other runs), and under `plan` the
//! plan itself. Written with the batch record, before its tasks; read by a
//! worker once per evaluated task (one `HGET`) and by the report (one
//! `HGETALL`).
//!
//! The report's rows are read as the batch counts are: one `HMGET` of a
//! few fields per task, pipelined a thousand at a time, so a report over
//! thousands of runs is a few round trips, never one per task.

use std::borrow::Cow;
use std::collections::HashMap;

use redis::AsyncCommands;

use super::{Reader, TaskRecord, MAX_BATCH_TASKS};
use crate::error::QueueError;
use crate::keys::Keys;
use flotilla_types::eval::{CheckStage, Verdict};
use flotilla_types::eval_plan::{Matrix, RunPlace, RunPlan, MAX_RUNS};
use flotilla_types::eval_report::RunRow;
use flotilla_types::ids::{BatchId, TaskId, TenantId};
use flotilla_types::task::{check_model, Pipeline, StopCode, TaskSpec, TaskStatus};
use flotilla_types::usage::Meter;
use flotilla_types::ValidationError;
use serde_json::Value;

/// The field of the runs hash that holds the plan.
const PLAN_FIELD: &str = "plan";
/// How many tasks one round of report reads covers.
const READ_CHUNK: usize = 1_000;
/// The task hash fields a report row is read from.
const ROW_FIELDS: [&str; 10] =
    ["spec", "status", "code", "verdict", "score", "check_stage", "steps_taken", "started_at", "finished_at", "meter"];

/// A batch's run plan and where each of its tasks sits in it, in the
/// order of its specs (rivals are filled in once the ids are known).
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRuns {
    pub plan: RunPlan,
    pub places: Vec<RunPlace>,
}

impl PlannedRuns {
    /// The write of the runs hash for the batch's tasks `ids`.
    pub(super) fn write(mut self, keys: &Keys, batch: &BatchId, ids: &[TaskId]) -> Result<redis::Cmd, QueueError> {
        if self.places.len() != ids.len() {
            return Err(QueueError::Corrupt(format!("batch {batch}: {} places for {} tasks", self.places.len(), ids.len())));
        }
        if self.plan.stop_on_pass && self.plan.best_of > 1 {
            let mut groups: HashMap<(u32, u32, u32), Vec<TaskId>> = HashMap::new();
            for (place, id) in self.places.iter().zip(ids) {
                groups.entry((place.task, place.cell, place.group)).or_default().push(id.clone());
            }
            for (place, id) in self.places.iter_mut().zip(ids) {
                let group = &groups[&(place.task, place.cell, place.group)];
                place.rivals = group.iter().filter(|other| *other != id).cloned().collect();
            }
        }
        let mut fields = Vec::with_capacity(ids.len() + 1);
        fields.push((PLAN_FIELD.to_owned(), encode(&self.plan)?));
        for (place, id) in self.places.iter().zip(ids) {
            fields.push((id.as_str().to_owned(), encode(place)?));
        }
        Ok(redis::Cmd::hset_multiple(keys.batch_runs(batch), &fields))
    }
}

fn encode(value: &impl serde::Serialize) -> Result<String, QueueError> {
    serde_json::to_string(value).map_err(|e| QueueError::Corrupt(format!("run plan: {e}")))
}

impl Reader<'_> {
    /// Where a task of `batch` sits in the batch's run plan; `None` for a
    /// plain batch's task.
    pub async fn run_place(self, batch: &BatchId, task: &TaskId) -> Result<Option<RunPlace>, QueueError> {
        let mut conn = self.redis.shared();
        let raw: Option<String> = conn.hget(self.keys.batch_runs(batch), task.as_str()).await?;
        Ok(raw.and_then(|raw| serde_json::from_str(&raw).ok()))
    }

    /// A batch's run plan and each task's place in it (empty for a plain
    /// batch, whose tasks each run once).
    pub async fn batch_runs(self, batch: &BatchId) -> Result<(RunPlan, HashMap<TaskId, RunPlace>), QueueError> {
        let mut conn = self.redis.shared();
        let mut raw: HashMap<String, String> = conn.hgetall(self.keys.batch_runs(batch)).await?;
        let plan = raw.remove(PLAN_FIELD).and_then(|p| serde_json::from_str(&p).ok()).unwrap_or_default();
        let places = raw
            .into_iter()
            .filter_map(|(id, place)| Some((TaskId::parse(&id).ok()?, serde_json::from_str(&place).ok()?)))
            .collect();
        Ok((plan, places))
    }

    /// One report row per task of `tenant`, in order; a task found neither
    /// in Redis nor in the archive is left out.
    pub async fn run_rows(
        self,
        tenant: &TenantId,
        ids: &[TaskId],
        places: &HashMap<TaskId, RunPlace>,
    ) -> Result<Vec<RunRow>, QueueError> {
        let mut rows = Vec::with_capacity(ids.len());
        for (chunk_index, chunk) in ids.chunks(READ_CHUNK).enumerate() {
            let reads =
                chunk.iter().map(|id| redis::cmd("HMGET").arg(self.keys.task(id)).arg(&ROW_FIELDS[..]).to_owned()).collect();
            let values: Vec<Vec<Option<String>>> = self.redis.query_many(reads).await?;
            let mut missing = Vec::new();
            for (i, (id, values)) in chunk.iter().zip(values).enumerate() {
                let hash: HashMap<String, String> =
                    ROW_FIELDS.iter().zip(values).filter_map(|(f, v)| Some(((*f).to_owned(), v?))).collect();
                if hash.is_empty() {
                    missing.push(id.clone());
                    continue;
                }
                let order = chunk_index * READ_CHUNK + i;
                rows.extend(row_of(id, order, &hash, places));
            }
            if !missing.is_empty() {
                // Archived tasks: read whole from the store.
                for (id, record) in missing.iter().zip(self.get_many(tenant, &missing).await?) {
                    let order = ids.iter().position(|x| x == id).unwrap_or(0);
                    rows.extend(record.map(|r| row_of_record(id, order, &r, places)));
                }
            }
        }
        rows.sort_by_key(|row| row.order);
        Ok(rows)
    }
}

/// Where a task sits: its stored place, or, in a plain batch, the task
/// `order` of the suite run once.
fn place_of(id: &TaskId, order: usize, places: &HashMap<TaskId, RunPlace>) -> RunPlace {
    places.get(id).cloned().unwrap_or(RunPlace { task: order as u32, cell: 0, run: 1, group: 0, rivals: Vec::new() })
}

fn row_of(id: &TaskId, order: usize, h: &HashMap<String, String>, places: &HashMap<TaskId, RunPlace>) -> Option<RunRow> {
    let spec: TaskSpec = serde_json::from_str(h.get("spec")?).ok()?;
    let time = |field: &str| h.get(field).and_then(|v| v.parse::<i64>().ok());
    let meter = h.get("meter").map(|m| Meter::from_json(m).view()).unwrap_or_default();
    Some(RunRow {
        order,
        task_id: id.clone(),
        place: place_of(id, order, places),
        name: suite_name(&spec),
        model: spec.model.clone(),
        pipeline: spec.pipeline,
        status: h.get("status").and_then(|s| TaskStatus::parse(s)),
        code: h.get("code").and_then(|c| StopCode::parse(c)),
        verdict: h.get("verdict").and_then(|v| Verdict::parse(v)),
        score: h.get("score").and_then(|v| v.parse().ok()),
        stage: h.get("check_stage").and_then(|v| CheckStage::parse(v)),
        steps: h.get("steps_taken").and_then(|v| v.parse().ok()).unwrap_or(0),
        duration_ms: time("started_at").zip(time("finished_at")).map(|(s, f)| (f - s).max(0) as u64),
        tokens: meter.input_tokens + meter.output_tokens,
        cost_usd: Some(meter.cost_usd),
    })
}

fn row_of_record(id: &TaskId, order: usize, r: &TaskRecord, places: &HashMap<TaskId, RunPlace>) -> RunRow {
    let ms = |t: &Option<String>| t.as_deref().and_then(flotilla_types::clock::parse_rfc3339);
    let tokens = r.usage.as_ref().map_or(0, |u| u.input_tokens + u.output_tokens);
    RunRow {
        order,
        task_id: id.clone(),
        place: place_of(id, order, places),
        name: suite_name(&r.spec),
        model: r.spec.model.clone(),
        pipeline: r.spec.pipeline,
        status: Some(r.status),
        code: r.code,
        verdict: r.verdict,
        score: r.score,
        stage: r.check_stage,
        steps: r.steps_taken,
        duration_ms: ms(&r.started_at).zip(ms(&r.finished_at)).map(|(s, f)| (f - s).max(0) as u64),
        tokens,
        cost_usd: r.usage.as_ref().map(|u| u.cost_usd),
    }
}

/// The name a suite task goes by in a report: its `metadata.name` (or
/// `metadata.id`) when a string, else the start of its prompt.
fn suite_name(spec: &TaskSpec) -> String {
    let named = spec.metadata.as_ref().and_then(|m| m.get("name").or_else(|| m.get("id"))).and_then(|v| v.as_str());
    match named {
        Some(name) => name.chars().take(120).collect(),
        None => spec.prompt.chars().take(80).collect(),
    }
}

/// The plan fields of a batch submit, as given.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanRequest<'a> {
    pub repeat: Option<u32>,
    pub best_of: Option<u32>,
    pub stop_on_pass: Option<bool>,
    pub matrix: Option<&'a Matrix>,
}

/// The run plan a batch asks for, checked; `None` for a plain batch.
fn run_plan(tasks: usize, asked: PlanRequest) -> Result<Option<RunPlan>, PlanError> {
    let count = |field: &str, value: Option<u32>| match value {
        Some(n) if !(1..=MAX_RUNS).contains(&n) => {
            Err(ValidationError::at(field, format!("{field} must be from 1 to {MAX_RUNS}")))
        }
        _ => Ok(value.unwrap_or(1)),
    };
    let plan = RunPlan {
        repeat: count("repeat", asked.repeat)?,
        best_of: count("best_of", asked.best_of)?,
        stop_on_pass: asked.stop_on_pass.unwrap_or(false),
        matrix: asked.matrix.cloned().unwrap_or_default(),
    };
    plan.matrix.validate().map_err(|e| e.under("matrix"))?;
    if plan.stop_on_pass && plan.best_of < 2 {
        return Err(ValidationError::at("stop_on_pass", "stop_on_pass needs best_of of 2 or more").into());
    }
    if plan.is_plain() {
        return Ok(None);
    }
    let runs = tasks.saturating_mul(plan.runs_per_task());
    if runs > MAX_BATCH_TASKS {
        return Err(PlanError::TooManyRuns(runs));
    }
    Ok(Some(plan))
}

/// Why a batch's plan is refused.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A field of the plan, or a task's value the plan lays over, is bad.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// The plan would run more tasks than a batch may hold: a batch too
    /// large, not a malformed one.
    #[error("the batch would run {0} tasks (tasks × matrix cells × repeat × best_of); at most {MAX_BATCH_TASKS}")]
    TooManyRuns(usize),
}

/// The tasks a batch runs, expanded by the plan it asks for, and where
/// each sits in it; the tasks as given for a plain batch.
pub fn plan_batch<'a>(tasks: &'a [Value], asked: PlanRequest<'_>) -> Result<(Cow<'a, [Value]>, Option<PlannedRuns>), PlanError> {
    match run_plan(tasks.len(), asked)? {
        None => Ok((Cow::Borrowed(tasks), None)),
        Some(plan) => {
            check_laid_over(tasks)?;
            let (tasks, places) = expand_tasks(tasks, &plan);
            Ok((Cow::Owned(tasks), Some(PlannedRuns { plan, places })))
        }
    }
}

/// Each task's own `pipeline` and `model`, checked on their own though a
/// matrix may lay its own over them: a value a task gives is one its field
/// takes, as for a batch without a plan.
fn check_laid_over(tasks: &[Value]) -> Result<(), ValidationError> {
    for (i, task) in tasks.iter().enumerate() {
        let given = |name: &str| task.get(name).filter(|value| !value.is_null());
        if let Some(pipeline) = given("pipeline") {
            serde_json::from_value::<Pipeline>(pipeline.clone())
                .map_err(|e| ValidationError::at(format!("tasks[{i}].pipeline"), e.to_string()))?;
        }
        if let Some(model) = given("model") {
            let field = format!("tasks[{i}].model");
            let Some(model) = model.as_str() else { return Err(ValidationError::at(field, "a model is a string")) };
            check_model(&field, model)?;
        }
    }
    Ok(())
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

/// A batch's tasks expanded by its plan: each suite task in each matrix
/// cell (its `model` and `pipeline` laid over the task's own), `repeat`
/// groups of `best_of` runs, in that order; and each run's place. The
/// places come without rivals (they are ids, made later).
pub fn expand_tasks(tasks: &[Value], plan: &RunPlan) -> (Vec<Value>, Vec<RunPlace>) {
    let cells = plan.matrix.cells();
    let (repeat, best_of) = (plan.repeat.max(1), plan.best_of.max(1));
    let mut expanded = Vec::with_capacity(tasks.len() * plan.runs_per_task());
    let mut places = Vec::with_capacity(expanded.capacity());
    for (task, value) in tasks.iter().enumerate() {
        for (cell_index, cell) in cells.iter().enumerate() {
            let mut laid = value.clone();
            if let Value::Object(fields) = &mut laid {
                if let Some(model) = &cell.model {
                    fields.insert("model".to_owned(), model.clone().into());
                }
                if let Some(pipeline) = cell.pipeline {
                    fields.insert("pipeline".to_owned(), pipeline.as_str().into());
                }
            }
            for group in 0..repeat {
                for k in 0..best_of {
                    expanded.push(laid.clone());
                    places.push(RunPlace {
                        task: task as u32,
                        cell: cell_index as u32,
                        run: group * best_of + k + 1,
                        group,
                        rivals: Vec::new(),
                    });
                }
            }
        }
    }
    (expanded, places)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_types::eval_plan::Matrix;
    use flotilla_types::task::Pipeline;
    use serde_json::json;

    #[test]
    fn a_plan_expands_tasks_by_cell_then_repeat_then_best_of() {
        let plan = RunPlan {
            repeat: 2,
            best_of: 2,
            stop_on_pass: true,
            matrix: Matrix { model: Some(vec!["a".into(), "b".into()]), pipeline: Some(vec![Pipeline::Scripted]) },
        };
        let (tasks, places) = expand_tasks(&[json!({"prompt": "x", "model": "mine"})], &plan);
        assert_eq!(tasks.len(), 8);
        assert_eq!(tasks[0]["model"], "a");
        assert_eq!(tasks[4]["model"], "b");
        assert_eq!(tasks[7]["pipeline"], "scripted");
        let runs: Vec<(u32, u32, u32)> = places.iter().map(|p| (p.cell, p.group, p.run)).collect();
        assert_eq!(runs[..4], [(0, 0, 1), (0, 0, 2), (0, 1, 3), (0, 1, 4)]);
        let ids: Vec<TaskId> = (0..8).map(|_| TaskId::generate()).collect();
        let planned = PlannedRuns { plan, places };
        let cmd = planned.write(&Keys::new("t"), &BatchId::generate(), &ids).expect("write");
        let packed = String::from_utf8_lossy(&cmd.get_packed_command()).into_owned();
        assert!(packed.contains(&format!("\"rivals\":[\"{}\"]", ids[1])), "run 1's rival is run 2: {packed}");
    }

    /// A run read back from the archive is the row it was in Redis: a
    /// failed set-up stays a set-up error in the report.
    #[test]
    fn an_archived_run_keeps_the_stage_of_its_verdict() {
        use super::super::record::StoredRecord;
        let id = TaskId::generate();
        let spec = json!({"prompt": "p", "pipeline": "scripted", "actions": []}).to_string();
        let hash: HashMap<String, String> = [
            ("spec", spec.as_str()),
            ("tenant", "acme"),
            ("status", "failed"),
            ("code", "problem"),
            ("verdict", "error"),
            ("check_stage", "setup"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let hot = row_of(&id, 0, &hash, &HashMap::new()).expect("row");
        let archived = TaskRecord::from_hash(&id, hash).expect("record").expect("some");
        let cold = row_of_record(&id, 0, &archived, &HashMap::new());
        assert_eq!((hot.stage, cold.stage), (Some(CheckStage::Setup), Some(CheckStage::Setup)));
        assert_eq!((hot.verdict, cold.verdict), (Some(Verdict::Error), Some(Verdict::Error)));
    }

    #[test]
    fn a_plain_batch_has_no_plan_and_bad_plans_name_their_field() {
        let asked = |value: &Value| {
            let matrix = value.get("matrix").map(|m| serde_json::from_value::<Matrix>(m.clone()).expect("matrix"));
            let number = |field: &str| value.get(field).and_then(Value::as_u64).map(|n| n as u32);
            let tasks = value["tasks"].as_array().map_or(0, Vec::len);
            run_plan(
                tasks,
                PlanRequest {
                    repeat: number("repeat"),
                    best_of: number("best_of"),
                    stop_on_pass: value.get("stop_on_pass").and_then(Value::as_bool),
                    matrix: matrix.as_ref(),
                },
            )
        };
        assert!(asked(&json!({"tasks": [{"prompt": "x"}]})).expect("plain").is_none());
        let cases = [
            (json!({"tasks": [{"prompt": "x"}], "repeat": 0}), "repeat"),
            (json!({"tasks": [{"prompt": "x"}], "best_of": 101}), "best_of"),
            (json!({"tasks": [{"prompt": "x"}], "stop_on_pass": true}), "stop_on_pass"),
            (json!({"tasks": [{"prompt": "x"}], "matrix": {"model": []}}), "matrix.model"),
            (json!({"tasks": [{"prompt": "x"}], "repeat": 100, "best_of": 101}), "best_of"),
        ];
        for (value, field) in cases {
            let Err(PlanError::Invalid(err)) = asked(&value) else { panic!("{value} is refused as invalid") };
            assert_eq!(err.field.as_deref(), Some(field), "{value}");
        }
        let too_many = json!({"tasks": vec![json!({"prompt": "x"}); 200], "repeat": 100});
        assert!(matches!(asked(&too_many), Err(PlanError::TooManyRuns(20_000))));
    }

    #[test]
    fn an_expanded_tasks_error_names_the_task_given() {
        let given = [json!({"prompt": "a"}), json!({"prompt": "b"})];
        let (tasks, runs) = plan_batch(&given, PlanRequest { repeat: Some(3), ..PlanRequest::default() }).expect("planned");
        assert_eq!(tasks.len(), 6);
        let error = place_error(ValidationError::at("tasks[4].prompt", "bad"), runs.as_ref());
        assert_eq!(error.field.as_deref(), Some("tasks[1].prompt"));
    }
}
