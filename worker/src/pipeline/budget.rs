//! A task's budget and the meter of its sandbox time.
//!
//! What a task spends is counted on it as it happens (see
//! `flotilla_types::usage`); after each count the task's totals, over
//! every attempt, are held against its `budget`, and a task past it ends
//! `failed` with code `budget` right after the step that crossed it. Its
//! session then releases the sandbox as for any other ending.

use std::time::Instant;

use flotilla_types::cost::usd;
use flotilla_types::task::{StopCode, TaskSpec};
use flotilla_types::usage::{Amount, Meter};

use super::PipelineError;

/// Ends the task when its counters are past its budget.
pub fn check(spec: &TaskSpec, meter: &Meter) -> Result<(), PipelineError> {
    let Some(budget) = spec.budget else { return Ok(()) };
    if let Some(max) = budget.max_tokens.filter(|max| meter.tokens() > *max) {
        return Err(crossed(format!("the task used {} tokens, past its budget of {max}", meter.tokens())));
    }
    if let Some(max) = budget.max_cost_usd.filter(|max| meter.cost_micros() > max.micros()) {
        let used = usd(meter.cost_micros());
        return Err(crossed(format!("the task's model calls cost ${used:.6}, past its budget of ${}", f64::from(max))));
    }
    if let Some(max_s) = budget.max_sandbox_s.filter(|max_s| meter.sandbox_ms() > max_s * 1000) {
        let used_s = meter.sandbox_ms() as f64 / 1000.0;
        return Err(crossed(format!("the task held sandboxes for {used_s:.1} s, past its budget of {max_s} s")));
    }
    Ok(())
}

fn crossed(message: String) -> PipelineError {
    PipelineError::Fatal { code: StopCode::Budget, message }
}

/// The time a task has held its sandbox and not yet counted.
#[derive(Debug)]
pub struct SandboxClock {
    provider: String,
    since: Instant,
}

impl SandboxClock {
    /// Starts counting a sandbox of `provider` taken now.
    pub fn start(provider: &str) -> Self {
        Self { provider: provider.to_owned(), since: Instant::now() }
    }

    /// The time held since the last lap, without starting a new one (for
    /// the last count of a run that hands its sandbox on).
    pub fn so_far(&self) -> Amount {
        Amount::SandboxMs { provider: self.provider.clone(), ms: self.since.elapsed().as_millis() as u64 }
    }

    /// The time held since the last lap, as an amount to count.
    pub fn lap(&mut self) -> Amount {
        let now = Instant::now();
        let ms = now.duration_since(self.since).as_millis() as u64;
        self.since = now;
        Amount::SandboxMs { provider: self.provider.clone(), ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_types::cost::Usd;
    use flotilla_types::task::Budget;

    fn spec(max_tokens: Option<u64>, max_sandbox_s: Option<u64>) -> TaskSpec {
        TaskSpec {
            prompt: "p".into(),
            budget: Some(Budget { max_tokens, max_sandbox_s, max_cost_usd: None }),
            ..TaskSpec::default()
        }
    }

    fn meter(tokens: u64, sandbox_ms: u64) -> Meter {
        Meter([("tokens".to_owned(), tokens), ("sandbox_ms:local".to_owned(), sandbox_ms)].into_iter().collect())
    }

    #[test]
    fn crossing_the_money_budget_ends_the_task_with_code_budget() {
        let budget = Budget { max_tokens: None, max_sandbox_s: None, max_cost_usd: Some(Usd::from_micros(10_000)) };
        let spec = TaskSpec { prompt: "p".into(), budget: Some(budget), ..TaskSpec::default() };
        let cost = |micros: u64| Meter([("cost_micros".to_owned(), micros)].into_iter().collect());
        assert!(check(&spec, &cost(10_000)).is_ok(), "spending exactly the budget is within it");
        match check(&spec, &cost(10_001)) {
            Err(PipelineError::Fatal { code: StopCode::Budget, message }) => assert!(message.contains("$0.010001"), "{message}"),
            other => panic!("expected a budget failure, got {other:?}"),
        }
    }

    #[test]
    fn a_task_within_its_budget_goes_on() {
        assert!(check(&spec(Some(100), Some(2)), &meter(100, 2000)).is_ok());
        assert!(check(&TaskSpec::default(), &meter(u64::MAX, u64::MAX)).is_ok());
    }

    #[test]
    fn crossing_either_meter_ends_the_task_with_code_budget() {
        for (spec, meter) in [(spec(Some(100), None), meter(101, 0)), (spec(None, Some(2)), meter(0, 2001))] {
            match check(&spec, &meter) {
                Err(PipelineError::Fatal { code: StopCode::Budget, .. }) => {}
                other => panic!("expected a budget failure, got {other:?}"),
            }
        }
    }
}
