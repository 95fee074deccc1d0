//! The report of an evaluation batch (`GET /v1/batches/{id}/report`),
//! computed from one row per run: the rows in, the report out, nothing
//! read on the way, so the API answers from what is stored in a few round
//! trips and the CLI and dashboard read the same shape back.
//!
//! Units: a *run* is one task of the batch; a *group* is the `best_of`
//! runs of one suite task in one matrix cell and one repeat, judged by its
//! best run (passed first, then the highest score); a suite task in a cell
//! has `repeat` groups. Pass rate and mean score are over groups, pass@k
//! over each suite task's groups (the unbiased estimator of Chen et al.,
//! 2021), and spending (steps, time, tokens, cost) is every run's, per
//! group ("per task") and per passed group ("per success").

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::eval::{CheckStage, Verdict};
use crate::eval_plan::{Matrix, RunPlace, RunPlan};
use crate::ids::{BatchId, TaskId};
use crate::task::{Pipeline, StopCode, TaskStatus};

/// One run as stored: where it sits in the plan and how it went.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRow {
    /// Its place in the batch's task list.
    pub order: usize,
    pub task_id: TaskId,
    pub place: RunPlace,
    /// The suite task's name: `metadata.name` or the start of its prompt.
    pub name: String,
    pub model: Option<String>,
    pub pipeline: Option<Pipeline>,
    pub status: Option<TaskStatus>,
    pub code: Option<StopCode>,
    pub verdict: Option<Verdict>,
    pub score: Option<f64>,
    pub stage: Option<CheckStage>,
    pub steps: u32,
    pub duration_ms: Option<u64>,
    pub tokens: u64,
    /// What the run cost, where the server prices tokens.
    pub cost_usd: Option<f64>,
}

/// The report of a batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BatchReport {
    pub batch_id: BatchId,
    pub repeat: u32,
    pub best_of: u32,
    pub stop_on_pass: bool,
    pub matrix: Matrix,
    /// Runs (tasks) in the batch.
    pub runs: u64,
    /// Runs that have ended.
    pub ended: u64,
    /// Whether every run has ended: until then the figures may move.
    pub complete: bool,
    /// The figures per model and pipeline.
    pub cells: Vec<CellReport>,
    /// Each suite task, per model and pipeline.
    pub tasks: Vec<TaskReport>,
}

/// The figures of one model and pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CellReport {
    pub model: Option<String>,
    pub pipeline: Option<Pipeline>,
    /// Suite tasks.
    pub tasks: u64,
    pub runs: u64,
    /// Groups judged by their best run: `tasks × repeat`.
    pub groups: u64,
    pub passed: u64,
    /// Groups whose best run's check failed.
    pub failed: u64,
    /// Groups whose best run could not be judged by its check.
    pub errors: u64,
    /// Groups whose best run's set-up failed (the agent never started):
    /// apart from `failed` and `errors`.
    pub setup_errors: u64,
    /// Groups with no verdict yet (running, cancelled, or no check).
    pub unjudged: u64,
    /// Runs cancelled (by `stop_on_pass` or by hand).
    pub cancelled_runs: u64,
    /// `passed / groups`.
    pub pass_rate: f64,
    /// The mean of each group's best score (none counts 0).
    pub mean_score: f64,
    /// pass@k for k from 1 to `repeat`, keyed by k.
    pub pass_at_k: BTreeMap<String, f64>,
    /// Every run's spending over the groups.
    pub per_task: Spend,
    /// Every run's spending over the passed groups; `null` with none.
    pub per_success: Option<Spend>,
}

/// What runs spent, averaged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Spend {
    pub steps: f64,
    pub duration_s: f64,
    pub tokens: f64,
    /// `null` until every run is priced.
    pub cost_usd: Option<f64>,
}

/// One suite task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskReport {
    /// Its place in the suite, from 0.
    pub task: u32,
    pub name: String,
    pub cells: Vec<TaskCell>,
}

/// One suite task in one model and pipeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskCell {
    pub model: Option<String>,
    pub pipeline: Option<Pipeline>,
    /// The best verdict over its groups.
    pub verdict: Option<Verdict>,
    pub score: Option<f64>,
    pub passed_groups: u32,
    pub groups: u32,
    pub runs: Vec<RunView>,
}

/// One run of a suite task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunView {
    pub task_id: TaskId,
    pub run: u32,
    pub status: Option<TaskStatus>,
    pub verdict: Option<Verdict>,
    pub score: Option<f64>,
    /// Whether it is its group's best run, the one that counts.
    pub kept: bool,
}

/// How a run ranks in its group: passed first, then by score, then any
/// verdict over none.
fn rank(row: &RunRow) -> (u8, i64) {
    let verdict = match row.verdict {
        Some(Verdict::Passed) => 3,
        Some(Verdict::Failed) => 2,
        Some(Verdict::Error) => 1,
        None => 0,
    };
    (verdict, (row.score.unwrap_or(0.0) * 1e6) as i64)
}

type CellKey = (u32, Option<String>, Option<Pipeline>);

/// The report of a batch with this plan, from its runs' rows.
pub fn report(batch_id: BatchId, plan: &RunPlan, rows: &[RunRow]) -> BatchReport {
    let mut by_cell: BTreeMap<CellKey, BTreeMap<u32, BTreeMap<u32, Vec<&RunRow>>>> = BTreeMap::new();
    for row in rows {
        let key = (row.place.cell, row.model.clone(), row.pipeline);
        by_cell.entry(key).or_default().entry(row.place.task).or_default().entry(row.place.group).or_default().push(row);
    }
    let mut tasks: BTreeMap<u32, TaskReport> = BTreeMap::new();
    let mut cells = Vec::with_capacity(by_cell.len());
    for ((_, model, pipeline), suite) in &by_cell {
        let mut figures = Figures::default();
        for (task, groups) in suite {
            let cell = figures.add_task(groups);
            let name = groups.values().flatten().next().map(|r| r.name.clone()).unwrap_or_default();
            let entry = tasks.entry(*task).or_insert_with(|| TaskReport { task: *task, name, cells: Vec::new() });
            entry.cells.push(TaskCell { model: model.clone(), pipeline: *pipeline, ..cell });
        }
        cells.push(figures.cell(model.clone(), *pipeline));
    }
    let ended = rows.iter().filter(|r| r.status.is_some_and(TaskStatus::is_terminal)).count() as u64;
    BatchReport {
        batch_id,
        repeat: plan.repeat.max(1),
        best_of: plan.best_of.max(1),
        stop_on_pass: plan.stop_on_pass,
        matrix: plan.matrix.clone(),
        runs: rows.len() as u64,
        ended,
        complete: ended == rows.len() as u64,
        cells,
        tasks: tasks.into_values().collect(),
    }
}

/// A cell's figures as its suite tasks are added.
#[derive(Default)]
struct Figures {
    tasks: u64,
    runs: u64,
    groups: u64,
    passed: u64,
    failed: u64,
    errors: u64,
    setup_errors: u64,
    unjudged: u64,
    cancelled_runs: u64,
    score_sum: f64,
    /// Each suite task's (groups, passed groups).
    pass_counts: Vec<(u64, u64)>,
    steps: u64,
    duration_ms: u64,
    tokens: u64,
    cost_usd: Option<f64>,
    unpriced: bool,
}

impl Figures {
    /// Adds one suite task's groups; returns its own cell (without model
    /// and pipeline).
    fn add_task(&mut self, groups: &BTreeMap<u32, Vec<&RunRow>>) -> TaskCell {
        self.tasks += 1;
        let mut runs = Vec::new();
        let mut passed_groups = 0;
        let mut best: Option<&RunRow> = None;
        for rows in groups.values() {
            self.groups += 1;
            let kept = rows.iter().copied().max_by_key(|r| (rank(r), std::cmp::Reverse(r.place.run)));
            match kept.and_then(|r| r.verdict.map(|v| (v, r.stage))) {
                Some((Verdict::Passed, _)) => {
                    self.passed += 1;
                    passed_groups += 1;
                }
                Some((Verdict::Failed, _)) => self.failed += 1,
                Some((Verdict::Error, Some(CheckStage::Setup))) => self.setup_errors += 1,
                Some((Verdict::Error, _)) => self.errors += 1,
                None => self.unjudged += 1,
            }
            self.score_sum += kept.and_then(|r| r.score).unwrap_or(0.0);
            if let Some(kept) = kept {
                if best.is_none_or(|b| rank(kept) > rank(b)) {
                    best = Some(kept);
                }
            }
            for row in rows {
                self.add_run(row);
                let is_kept = kept.is_some_and(|k| k.task_id == row.task_id);
                runs.push(RunView {
                    task_id: row.task_id.clone(),
                    run: row.place.run,
                    status: row.status,
                    verdict: row.verdict,
                    score: row.score,
                    kept: is_kept,
                });
            }
        }
        self.pass_counts.push((groups.len() as u64, passed_groups as u64));
        runs.sort_by_key(|r| r.run);
        TaskCell {
            model: None,
            pipeline: None,
            verdict: best.and_then(|b| b.verdict),
            score: best.and_then(|b| b.score),
            passed_groups,
            groups: groups.len() as u32,
            runs,
        }
    }

    fn add_run(&mut self, row: &RunRow) {
        self.runs += 1;
        if row.status == Some(TaskStatus::Cancelled) {
            self.cancelled_runs += 1;
        }
        self.steps += u64::from(row.steps);
        self.duration_ms += row.duration_ms.unwrap_or(0);
        self.tokens += row.tokens;
        match row.cost_usd {
            Some(cost) => *self.cost_usd.get_or_insert(0.0) += cost,
            None => self.unpriced = true,
        }
    }

    fn spend_over(&self, count: u64) -> Spend {
        let n = count.max(1) as f64;
        Spend {
            steps: self.steps as f64 / n,
            duration_s: self.duration_ms as f64 / 1000.0 / n,
            tokens: self.tokens as f64 / n,
            cost_usd: if self.unpriced { None } else { self.cost_usd.map(|c| c / n) },
        }
    }

    fn cell(&self, model: Option<String>, pipeline: Option<Pipeline>) -> CellReport {
        let groups = self.groups.max(1) as f64;
        CellReport {
            model,
            pipeline,
            tasks: self.tasks,
            runs: self.runs,
            groups: self.groups,
            passed: self.passed,
            failed: self.failed,
            errors: self.errors,
            setup_errors: self.setup_errors,
            unjudged: self.unjudged,
            cancelled_runs: self.cancelled_runs,
            pass_rate: self.passed as f64 / groups,
            mean_score: self.score_sum / groups,
            pass_at_k: pass_at_k(&self.pass_counts),
            per_task: self.spend_over(self.groups),
            per_success: (self.passed > 0).then(|| self.spend_over(self.passed)),
        }
    }
}

/// pass@k averaged over suite tasks, each with `n` groups of which `c`
/// passed: `1 − C(n−c, k) / C(n, k)`, for k up to the fewest groups any
/// task has.
pub fn pass_at_k(counts: &[(u64, u64)]) -> BTreeMap<String, f64> {
    let Some(max_k) = counts.iter().map(|(n, _)| *n).min() else { return BTreeMap::new() };
    (1..=max_k)
        .map(|k| {
            let sum: f64 = counts.iter().map(|&(n, c)| one_pass_at_k(n, c, k)).sum();
            (k.to_string(), sum / counts.len() as f64)
        })
        .collect()
}

fn one_pass_at_k(n: u64, c: u64, k: u64) -> f64 {
    if n - c < k {
        return 1.0;
    }
    // C(n−c, k) / C(n, k) = Π_{i=n−c+1}^{n} (1 − k / i)
    let fail: f64 = ((n - c + 1)..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    1.0 - fail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(task: u32, group: u32, run: u32, verdict: Option<Verdict>, score: Option<f64>) -> RunRow {
        RunRow {
            order: 0,
            task_id: TaskId::generate(),
            place: RunPlace { task, cell: 0, run, group, rivals: Vec::new() },
            name: format!("t{task}"),
            model: Some("m".into()),
            pipeline: Some(Pipeline::Scripted),
            status: Some(TaskStatus::Succeeded),
            code: Some(StopCode::Done),
            verdict,
            score,
            stage: verdict.map(|_| CheckStage::Check),
            steps: 2,
            duration_ms: Some(1_000),
            tokens: 10,
            cost_usd: None,
        }
    }

    #[test]
    fn pass_at_k_is_the_unbiased_estimate() {
        let at = pass_at_k(&[(3, 1)]);
        assert!((at["1"] - 1.0 / 3.0).abs() < 1e-9);
        assert!((at["2"] - 2.0 / 3.0).abs() < 1e-9);
        assert!((at["3"] - 1.0).abs() < 1e-9);
        assert_eq!(pass_at_k(&[(2, 0), (2, 2)])["1"], 0.5);
    }

    #[test]
    fn a_group_counts_its_best_run_and_every_run_spends() {
        let plan = RunPlan { repeat: 1, best_of: 3, stop_on_pass: true, matrix: Matrix::default() };
        let mut cancelled = row(0, 0, 3, None, None);
        cancelled.status = Some(TaskStatus::Cancelled);
        cancelled.steps = 0;
        let rows =
            vec![row(0, 0, 1, Some(Verdict::Failed), Some(0.0)), row(0, 0, 2, Some(Verdict::Passed), Some(1.0)), cancelled];
        let report = report(BatchId::generate(), &plan, &rows);
        let cell = &report.cells[0];
        assert_eq!((cell.groups, cell.passed, cell.runs, cell.cancelled_runs), (1, 1, 3, 1));
        assert_eq!(cell.pass_rate, 1.0);
        assert_eq!(cell.per_task.steps, 4.0, "every run's steps count");
        let kept: Vec<u32> = report.tasks[0].cells[0].runs.iter().filter(|r| r.kept).map(|r| r.run).collect();
        assert_eq!(kept, vec![2]);
    }

    #[test]
    fn set_up_failures_are_counted_apart() {
        let mut setup = row(1, 0, 1, Some(Verdict::Error), None);
        setup.stage = Some(CheckStage::Setup);
        let rows = vec![row(0, 0, 1, Some(Verdict::Passed), Some(1.0)), setup];
        let report = report(BatchId::generate(), &RunPlan::default(), &rows);
        let cell = &report.cells[0];
        assert_eq!((cell.passed, cell.setup_errors, cell.errors, cell.pass_rate), (1, 1, 0, 0.5));
    }
}
