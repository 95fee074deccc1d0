//! What model tokens cost: a price per model, in US dollars per million
//! tokens of each kind, and the cost of one call in micro-dollars.
//!
//! A call's input splits three ways, as the providers bill it: tokens read
//! from the prompt cache (`cached_input`), tokens written to it
//! (`cache_write`; OpenAI and Gemini write for free, so their price is the
//! plain input price) and the rest (`input`). Costs are kept in whole
//! micro-dollars, rounded once per call, so a task's cost is the exact sum
//! of its calls' and a tenant's day the exact sum of its tasks'.
//!
//! [`PriceTable::defaults`] ships the published prices of the models the
//! pipelines know, as of [`PRICES_AS_OF`]; the config file overrides any
//! figure (`[prices."<model>"]`). A model with no price counts its tokens
//! and has an unknown cost.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The day the default prices were read from the providers' price pages.
pub const PRICES_AS_OF: &str = "2026-11-29";

/// Micro-dollars in a dollar.
pub const MICROS_PER_USD: f64 = 1_000_000.0;

/// One model's prices, in US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    /// Input tokens neither read from nor written to the cache.
    pub input: f64,
    /// Input tokens read from the prompt cache.
    pub cached_input: f64,
    /// Input tokens written to the prompt cache (5-minute lifetime).
    pub cache_write: f64,
    /// Output tokens, thinking included.
    pub output: f64,
}

impl Price {
    const fn new(input: f64, cached_input: f64, cache_write: f64, output: f64) -> Self {
        Self { input, cached_input, cache_write, output }
    }

    /// The price's figures by name, for checks that name the bad one.
    pub fn figures(&self) -> [(&'static str, f64); 4] {
        [("input", self.input), ("cached_input", self.cached_input), ("cache_write", self.cache_write), ("output", self.output)]
    }

    /// What `tokens` cost at this price, in whole micro-dollars (a price
    /// per million tokens is a price in micro-dollars per token).
    pub fn cost_micros(&self, tokens: &TokenCounts) -> u64 {
        let micros = tokens.uncached_input() as f64 * self.input
            + tokens.cache_read as f64 * self.cached_input
            + tokens.cache_write as f64 * self.cache_write
            + tokens.output as f64 * self.output;
        micros.round().max(0.0) as u64
    }
}

/// The tokens of one model call, as the provider billed them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCounts {
    /// Every input token, those read from or written to the cache included.
    pub input: u64,
    /// Output tokens, thinking included.
    pub output: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write: u64,
}

impl TokenCounts {
    /// Input tokens billed at the plain input price.
    pub fn uncached_input(&self) -> u64 {
        self.input.saturating_sub(self.cache_read.saturating_add(self.cache_write))
    }
}

impl std::ops::AddAssign for TokenCounts {
    fn add_assign(&mut self, other: Self) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// Prices by model name.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PriceTable(BTreeMap<String, Price>);

impl PriceTable {
    /// The published prices of the models the pipelines know, as of
    /// [`PRICES_AS_OF`] (standard tier, prompts within the base context
    /// band).
    pub fn defaults() -> Self {
        let claude_opus = Price::new(5.0, 0.50, 6.25, 25.0);
        let claude_sonnet_4 = Price::new(3.0, 0.30, 3.75, 15.0);
        let table = [
            ("claude-fable-5-1", Price::new(10.0, 0.25, 12.50, 50.0)),
            ("claude-mythos-5", Price::new(10.0, 1.0, 12.50, 50.0)),
            ("claude-opus-5-5", Price::new(4.0, 0.20, 5.0, 20.0)),
            ("claude-opus-5", claude_opus),
            ("claude-opus-4-8", claude_opus),
            ("claude-opus-4-7", claude_opus),
            ("claude-opus-4-6", claude_opus),
            ("claude-opus-4-5", claude_opus),
            ("claude-opus-4-1", Price::new(15.0, 1.50, 18.75, 75.0)),
            ("claude-opus-4", Price::new(15.0, 1.50, 18.75, 75.0)),
            ("claude-sonnet-5-5", Price::new(2.0, 0.10, 2.50, 10.0)),
            ("claude-sonnet-5", Price::new(2.0, 0.20, 2.50, 10.0)),
            ("claude-sonnet-4-6", claude_sonnet_4),
            ("claude-sonnet-4-5", claude_sonnet_4),
            ("claude-sonnet-4", claude_sonnet_4),
            ("claude-haiku-5-5", Price::new(0.10, 0.01, 0.125, 0.50)),
            ("claude-haiku-4-5", Price::new(1.0, 0.10, 1.25, 5.0)),
            ("gpt-6-astra", Price::new(10.0, 1.0, 12.50, 50.0)),
            // The preview model has no cache discount.
            ("computer-use-preview", Price::new(3.0, 3.0, 3.0, 12.0)),
            // Gemini writes its implicit cache at the plain input price.
            ("gemini-3.6-flash", Price::new(0.75, 0.075, 0.75, 3.75)),
            ("gemini-3.5-flash", Price::new(1.50, 0.15, 1.50, 9.0)),
            ("gemini-3-flash", Price::new(0.50, 0.05, 0.50, 3.0)),
        ];
        Self(table.into_iter().map(|(model, price)| (model.to_owned(), price)).collect())
    }

    /// An empty table: every model's cost is unknown.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Sets (or replaces) one model's price.
    pub fn set(&mut self, model: &str, price: Price) {
        self.0.insert(model.to_owned(), price);
    }

    /// The price of `model`: its own entry, else the longest entry it is a
    /// dated or suffixed name of (`claude-sonnet-4-5-20250929` is priced as
    /// `claude-sonnet-4-5`, `gemini-3.6-flash-preview` as `gemini-3.6-flash`).
    pub fn price(&self, model: &str) -> Option<&Price> {
        if let Some(price) = self.0.get(model) {
            return Some(price);
        }
        self.0
            .iter()
            .filter(|(name, _)| model.strip_prefix(name.as_str()).is_some_and(|rest| rest.starts_with('-')))
            .max_by_key(|(name, _)| name.len())
            .map(|(_, price)| price)
    }

    /// What `tokens` of `model` cost in micro-dollars; `None` when the
    /// model has no price.
    pub fn cost_micros(&self, model: &str, tokens: &TokenCounts) -> Option<u64> {
        self.price(model).map(|price| price.cost_micros(tokens))
    }

    /// The models with a price.
    pub fn models(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

/// Micro-dollars as dollars, as the API shows them.
pub fn usd(micros: u64) -> f64 {
    micros as f64 / MICROS_PER_USD
}

/// A positive amount of US dollars, kept in whole micro-dollars (a budget
/// or a limit), written as a number of dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Usd {
    micros: u64,
}

/// The largest amount a budget or limit may name (a million dollars).
pub const MAX_USD: f64 = 1_000_000.0;

impl Usd {
    /// The amount in micro-dollars.
    pub fn micros(self) -> u64 {
        self.micros
    }

    /// An amount of `micros` micro-dollars.
    pub fn from_micros(micros: u64) -> Self {
        Self { micros }
    }
}

impl TryFrom<f64> for Usd {
    type Error = String;

    fn try_from(dollars: f64) -> Result<Self, Self::Error> {
        if !(dollars.is_finite() && dollars > 0.0 && dollars <= MAX_USD) {
            return Err(format!("{dollars} is not an amount of US dollars above 0 and at most {MAX_USD}"));
        }
        let micros = (dollars * MICROS_PER_USD).round() as u64;
        if micros == 0 {
            return Err(format!("{dollars} is less than one micro-dollar"));
        }
        Ok(Self { micros })
    }
}

impl From<Usd> for f64 {
    fn from(amount: Usd) -> f64 {
        usd(amount.micros)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_costs_each_kind_of_token_at_its_price() {
        let price = Price::new(4.0, 0.20, 5.0, 20.0);
        let tokens = TokenCounts { input: 10_000, output: 500, cache_read: 8_000, cache_write: 1_000 };
        // 1000 plain × 4 + 8000 × 0.2 + 1000 × 5 + 500 × 20 micro-dollars.
        assert_eq!(price.cost_micros(&tokens), 4_000 + 1_600 + 5_000 + 10_000);
    }

    #[test]
    fn a_dated_model_name_takes_its_family_price() {
        let table = PriceTable::defaults();
        assert_eq!(table.price("claude-sonnet-4-5-20250929"), table.price("claude-sonnet-4-5"));
        assert_eq!(table.price("claude-opus-4-5-20251101"), table.price("claude-opus-4-5"));
        assert_ne!(table.price("claude-opus-5-5"), table.price("claude-opus-5"));
        assert!(table.price("claude-opus-5x").is_none());
        assert!(table.cost_micros("a-model-nobody-priced", &TokenCounts::default()).is_none());
    }

    #[test]
    fn an_amount_of_dollars_reads_and_writes_as_a_number() {
        let amount: Usd = serde_json::from_str("0.25").expect("reads");
        assert_eq!(amount.micros(), 250_000);
        assert_eq!(serde_json::to_string(&amount).expect("writes"), "0.25");
        for bad in ["0", "-1", "1e9", "0.0000001"] {
            assert!(serde_json::from_str::<Usd>(bad).is_err(), "{bad}");
        }
    }
}
