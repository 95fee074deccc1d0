//! Usage: what each task and each tenant spent, counted as it happens.
//!
//! Every amount is a named counter ([`Meter`]): tokens in and out per model
//! (and of the input, those read from and written to the prompt cache), the
//! cost in micro-dollars per model (see [`crate::cost`]), sandbox
//! milliseconds per provider, steps, screenshot bytes stored and
//! bytes saved by deduplication. One fenced script adds an amount to the
//! task's own counters (the task hash's `meter` field, shown as the task's
//! `usage`) and to its tenant's counters of the UTC day (one hash per tenant
//! per day, `flotilla_queue::keys::Keys::usage_day`) in the same step
//! (`flotilla_queue::queue::Runner::add_usage`), so a
//! tenant's usage is exactly the sum of its tasks' usage; tasks are counted
//! by outcome in the same day hash when they end. The day hashes expire
//! [`USAGE_TTL_S`] after their last write: the cost of keeping usage grows
//! with tenants and days, never with tasks.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::cost::{usd, TokenCounts};

/// How long a tenant's day of usage is kept after its last write (100 days,
/// so at least 90 full days are always there).
pub const USAGE_TTL_S: u64 = 100 * 24 * 3600;
/// The counter of all tokens, in and out, of every model.
pub const TOKENS_FIELD: &str = "tokens";
/// The counter of the cost of every priced model call, in micro-dollars.
pub const COST_FIELD: &str = "cost_micros";
/// The most days one usage read covers.
pub const MAX_USAGE_DAYS: i64 = 100;

/// One amount to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Amount {
    /// Tokens of one model call, and what they cost in micro-dollars
    /// (`None`: the model has no price).
    Tokens { model: String, tokens: TokenCounts, cost_micros: Option<u64> },
    /// Time a task held a sandbox of this provider.
    SandboxMs { provider: String, ms: u64 },
    /// One step (action) taken.
    Step,
    /// A stored screenshot: `dedup` when its bytes were already stored.
    Screenshot { bytes: u64, dedup: bool },
}

impl Amount {
    /// The counters this amount adds to, with how much.
    pub fn counters(&self) -> Vec<(String, u64)> {
        match self {
            Amount::Tokens { model, tokens, cost_micros } => {
                let mut counters = vec![
                    (format!("in:{model}"), tokens.input),
                    (format!("out:{model}"), tokens.output),
                    (format!("cache_read:{model}"), tokens.cache_read),
                    (format!("cache_write:{model}"), tokens.cache_write),
                    (TOKENS_FIELD.to_owned(), tokens.input + tokens.output),
                ];
                match cost_micros {
                    Some(micros) => {
                        counters.push((format!("cost_micros:{model}"), *micros));
                        counters.push((COST_FIELD.to_owned(), *micros));
                    }
                    None => counters.push((format!("unpriced:{model}"), 1)),
                }
                counters
            }
            Amount::SandboxMs { provider, ms } => vec![(format!("sandbox_ms:{provider}"), *ms)],
            Amount::Step => vec![("steps".to_owned(), 1)],
            Amount::Screenshot { bytes, dedup: false } => vec![("screenshot_bytes".to_owned(), *bytes)],
            Amount::Screenshot { bytes, dedup: true } => vec![("screenshot_bytes_saved".to_owned(), *bytes)],
        }
    }
}

/// Named counters: a task's or a tenant's day's.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Meter(pub BTreeMap<String, u64>);

impl Meter {
    /// Counters from the task hash's `meter` JSON.
    pub fn from_json(text: &str) -> Self {
        let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(text).unwrap_or_default();
        Self(map.into_iter().filter_map(|(k, v)| Some((k, v.as_f64()? as u64))).collect())
    }

    fn get(&self, field: &str) -> u64 {
        self.0.get(field).copied().unwrap_or(0)
    }

    /// Tokens in and out, of every model.
    pub fn tokens(&self) -> u64 {
        self.get(TOKENS_FIELD)
    }

    /// The cost of every priced model call, in micro-dollars.
    pub fn cost_micros(&self) -> u64 {
        self.get(COST_FIELD)
    }

    /// Milliseconds of sandboxes held, of every provider.
    pub fn sandbox_ms(&self) -> u64 {
        self.0.iter().filter(|(k, _)| k.starts_with("sandbox_ms:")).map(|(_, v)| v).sum()
    }

    /// Adds another meter's counters to this one.
    pub fn add(&mut self, other: &Meter) {
        for (k, v) in &other.0 {
            *self.0.entry(k.clone()).or_default() += v;
        }
    }

    /// The counters as the API shows them.
    pub fn view(&self) -> UsageView {
        let mut view = UsageView::default();
        for (field, &n) in &self.0 {
            let (kind, name) = field.split_once(':').unwrap_or((field.as_str(), ""));
            match kind {
                "in" => {
                    view.input_tokens += n;
                    view.models.entry(name.to_owned()).or_default().input_tokens += n;
                }
                "out" => {
                    view.output_tokens += n;
                    view.models.entry(name.to_owned()).or_default().output_tokens += n;
                }
                "cache_read" => {
                    view.cache_read_tokens += n;
                    view.models.entry(name.to_owned()).or_default().cache_read_tokens += n;
                }
                "cache_write" => {
                    view.cache_write_tokens += n;
                    view.models.entry(name.to_owned()).or_default().cache_write_tokens += n;
                }
                "cost_micros" if !name.is_empty() => {
                    let model = view.models.entry(name.to_owned()).or_default();
                    model.cost_usd = Some(model.cost_usd.unwrap_or(0.0) + usd(n));
                }
                "cost_micros" => view.cost_usd = usd(n),
                "sandbox_ms" => *view.sandbox_ms.entry(name.to_owned()).or_default() += n,
                "steps" => view.steps += n,
                "screenshot_bytes" => view.screenshot_bytes += n,
                "screenshot_bytes_saved" => view.screenshot_bytes_saved += n,
                "tasks" => *view.tasks.entry(name.to_owned()).or_default() += n,
                _ => {}
            }
        }
        for (name, model) in &mut view.models {
            let unpriced = self.get(&format!("unpriced:{name}")) > 0;
            model.cost_usd = if unpriced { None } else { Some(model.cost_usd.unwrap_or(0.0)) };
        }
        view
    }
}

/// Tokens and cost of one model.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ModelTokens {
    /// Every input token, those read from or written to the cache included.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// What the model's calls cost in US dollars (counted in whole
    /// micro-dollars); `null` when the model has no price in the
    /// configuration.
    pub cost_usd: Option<f64>,
}

/// Usage as the API shows it, for one task or one tenant's day.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct UsageView {
    /// Tokens sent to models, all models together (those read from or
    /// written to the prompt cache included).
    pub input_tokens: u64,
    /// Tokens models answered with, all models together.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
    /// What the calls of priced models cost, in US dollars (counted in
    /// whole micro-dollars); a model without a price shows `cost_usd:
    /// null` under `models` and adds nothing here.
    pub cost_usd: f64,
    /// Tokens per model.
    pub models: BTreeMap<String, ModelTokens>,
    /// Milliseconds sandboxes were held, per provider.
    pub sandbox_ms: BTreeMap<String, u64>,
    /// Actions taken.
    pub steps: u64,
    /// Bytes of screenshots stored.
    pub screenshot_bytes: u64,
    /// Bytes of screenshots not stored again because they were already there.
    pub screenshot_bytes_saved: u64,
    /// Tasks ended, by outcome (`succeeded`, `failed`, `cancelled`); only
    /// in a tenant's usage.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tasks: BTreeMap<String, u64>,
}

/// How a client reads [`UsageView`] back: a counter it misses is zero, one
/// it does not know is left out. (A `#[serde(default)]` on [`UsageView`] itself
/// would make its fields optional in the OpenAPI document.)
#[derive(Default, Deserialize)]
#[serde(default)]
struct ReadUsage {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    cost_usd: f64,
    models: BTreeMap<String, ReadTokens>,
    sandbox_ms: BTreeMap<String, u64>,
    steps: u64,
    screenshot_bytes: u64,
    screenshot_bytes_saved: u64,
    tasks: BTreeMap<String, u64>,
}

#[derive(Default, Deserialize)]
#[serde(default)]
struct ReadTokens {
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    cost_usd: Option<f64>,
}

impl<'de> Deserialize<'de> for UsageView {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let read = ReadUsage::deserialize(deserializer)?;
        Ok(UsageView {
            input_tokens: read.input_tokens,
            output_tokens: read.output_tokens,
            cache_read_tokens: read.cache_read_tokens,
            cache_write_tokens: read.cache_write_tokens,
            cost_usd: read.cost_usd,
            models: read
                .models
                .into_iter()
                .map(|(model, t)| {
                    let tokens = ModelTokens {
                        input_tokens: t.input_tokens,
                        output_tokens: t.output_tokens,
                        cache_read_tokens: t.cache_read_tokens,
                        cache_write_tokens: t.cache_write_tokens,
                        cost_usd: t.cost_usd,
                    };
                    (model, tokens)
                })
                .collect(),
            sandbox_ms: read.sandbox_ms,
            steps: read.steps,
            screenshot_bytes: read.screenshot_bytes,
            screenshot_bytes_saved: read.screenshot_bytes_saved,
            tasks: read.tasks,
        })
    }
}

/// What an attempt's `flotilla_queue::queue::Runner::add_usage` answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Added {
    /// The task's counters after the addition, and where its tenant's
    /// tokens of today stand.
    Counted(Counted),
    /// Another attempt owns the task: nothing was counted.
    Fenced,
}

/// What a count left: the task's counters and its tenant's day.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counted {
    /// The task's counters after the addition.
    pub meter: Meter,
    /// Where the tenant's tokens of today stand.
    pub day: DayTokens,
}

/// Where a tenant's tokens of the UTC day stand against its
/// `max_tokens_per_day`, as a count found them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DayTokens {
    /// Below the limit, or no limit.
    Left,
    /// The tenant spent its tokens of today: its tasks wait until this
    /// time (epoch ms, the next UTC midnight by the queue's clock).
    Spent { resume_at_ms: i64 },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_show_per_model_and_provider() {
        let mut meter = Meter::default();
        for amount in [
            Amount::Tokens {
                model: "gpt-x".into(),
                tokens: TokenCounts { input: 10, output: 3, cache_read: 6, cache_write: 0 },
                cost_micros: Some(42),
            },
            Amount::Tokens {
                model: "claude-y".into(),
                tokens: TokenCounts { input: 5, output: 1, cache_read: 0, cache_write: 2 },
                cost_micros: None,
            },
            Amount::SandboxMs { provider: "local".into(), ms: 1500 },
            Amount::Step,
            Amount::Screenshot { bytes: 100, dedup: false },
            Amount::Screenshot { bytes: 40, dedup: true },
        ] {
            for (field, n) in amount.counters() {
                *meter.0.entry(field).or_default() += n;
            }
        }
        assert_eq!(meter.tokens(), 19);
        assert_eq!(meter.sandbox_ms(), 1500);
        let view = meter.view();
        assert_eq!((view.input_tokens, view.output_tokens), (15, 4));
        assert_eq!((view.cache_read_tokens, view.cache_write_tokens, view.cost_usd), (6, 2, 0.000042));
        let gpt = ModelTokens {
            input_tokens: 10,
            output_tokens: 3,
            cache_read_tokens: 6,
            cache_write_tokens: 0,
            cost_usd: Some(0.000042),
        };
        assert_eq!(view.models["gpt-x"], gpt);
        assert_eq!(view.models["claude-y"].cost_usd, None, "a model without a price has an unknown cost");
        assert_eq!(view.sandbox_ms["local"], 1500);
        assert_eq!((view.steps, view.screenshot_bytes, view.screenshot_bytes_saved), (1, 100, 40));
    }

    #[test]
    fn a_shown_usage_reads_back_with_missing_counters_as_zero() {
        let meter = Meter::from_json(r#"{"in:m":12,"out:m":3,"tokens":15,"steps":2,"sandbox_ms:local":900}"#);
        let shown = serde_json::to_string(&meter.view()).expect("writes");
        assert_eq!(serde_json::from_str::<UsageView>(&shown).expect("reads"), meter.view());
        let partial: UsageView =
            serde_json::from_str(r#"{"steps": 4, "models": {"m": {"input_tokens": 1}}, "new_counter": 7}"#).expect("reads");
        assert_eq!((partial.steps, partial.input_tokens, partial.models["m"].output_tokens), (4, 0, 0));
    }

    #[test]
    fn the_stored_json_reads_back() {
        let meter = Meter::from_json(r#"{"in:m":12,"out:m":3,"tokens":15,"steps":2}"#);
        assert_eq!(meter.tokens(), 15);
        assert_eq!(meter.view().models["m"].output_tokens, 3);
        assert_eq!(Meter::from_json("garbage"), Meter::default());
    }
}
