//! What a task's model calls cost: the configured price table applied to
//! each call's tokens as it is counted, so every count carries its cost in
//! micro-dollars beside its tokens (see `flotilla_types::cost`). A model
//! without a price counts its tokens, has an unknown cost, and is warned
//! about once per process.

use std::collections::HashSet;
use std::sync::Mutex;

use flotilla_types::cost::{PriceTable, TokenCounts};
use flotilla_types::usage::Amount;

/// The price table and the models already warned about.
#[derive(Debug)]
pub struct Pricing {
    table: PriceTable,
    warned: Mutex<HashSet<String>>,
}

impl Default for Pricing {
    /// The shipped default prices.
    fn default() -> Self {
        Self::new(PriceTable::defaults())
    }
}

impl Pricing {
    pub fn new(table: PriceTable) -> Self {
        Self { table, warned: Mutex::new(HashSet::new()) }
    }

    /// What `tokens` of `model` cost in micro-dollars, `None` (with one
    /// warning per model) when it has no price.
    pub fn cost_micros(&self, model: &str, tokens: &TokenCounts) -> Option<u64> {
        let cost = self.table.cost_micros(model, tokens);
        if cost.is_none() {
            let first = self.warned.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).insert(model.to_owned());
            if first {
                tracing::warn!(model, "the model has no price: its tokens are counted and its cost is unknown; add [prices.\"<model>\"] to the config file");
            }
        }
        cost
    }

    /// One call's tokens of `model`, with their cost, as an amount to count.
    pub fn tokens(&self, model: &str, tokens: TokenCounts) -> Amount {
        Amount::Tokens { model: model.to_owned(), tokens, cost_micros: self.cost_micros(model, &tokens) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_priced_call_carries_its_cost_and_an_unpriced_one_none() {
        let pricing = Pricing::default();
        let tokens = TokenCounts { input: 1000, output: 100, cache_read: 800, cache_write: 0 };
        let Amount::Tokens { cost_micros, .. } = pricing.tokens("claude-opus-5-5", tokens) else { panic!("tokens") };
        assert_eq!(cost_micros, Some(200 * 4 + 160 + 100 * 20));
        let Amount::Tokens { cost_micros, .. } = pricing.tokens("no-such-model", tokens) else { panic!("tokens") };
        assert_eq!(cost_micros, None);
        pricing.tokens("no-such-model", tokens);
        assert_eq!(pricing.warned.lock().expect("lock").len(), 1, "one warning per model");
    }
}
