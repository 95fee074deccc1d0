//! The price table: what each model's tokens cost, from
//! [`PriceTable::defaults`] with the config file's `[prices."<model>"]`
//! tables laid over it. A table names all four figures (`input`,
//! `cached_input`, `cache_write`, `output`, US dollars per million tokens),
//! so an override never half-inherits a figure it did not mean to keep.

use flotilla_types::cost::{Price, PriceTable};

use super::ConfigError;

/// The defaults with the file's `prices` table (if any) laid over them.
pub(super) fn load(table: Option<toml::Value>) -> Result<PriceTable, ConfigError> {
    let mut prices = PriceTable::defaults();
    let Some(value) = table else { return Ok(prices) };
    let toml::Value::Table(table) = value else {
        return Err(ConfigError::new("prices", "must be a table of [prices.\"<model>\"] tables"));
    };
    for (model, value) in table {
        let at = format!("prices.{model}");
        if model.trim().is_empty() {
            return Err(ConfigError::new("prices", "a model name is empty"));
        }
        let price: Price = value.try_into().map_err(|e: toml::de::Error| {
            ConfigError::new(&at, format!("{}: it takes input, cached_input, cache_write and output", e.message()))
        })?;
        if let Some((figure, _)) = price.figures().into_iter().find(|(_, usd)| !(usd.is_finite() && *usd >= 0.0)) {
            return Err(ConfigError::new(
                &format!("{at}.{figure}"),
                "must be a number of US dollars per million tokens, 0 or more",
            ));
        }
        prices.set(&model, price);
    }
    Ok(prices)
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_types::cost::TokenCounts;

    fn table(text: &str) -> Option<toml::Value> {
        text.parse::<toml::Table>().expect("toml").remove("prices")
    }

    #[test]
    fn the_file_overrides_a_default_and_adds_a_model() {
        let text = "[prices.\"claude-opus-5-5\"]\ninput = 1.0\ncached_input = 0.1\ncache_write = 1.25\noutput = 2.0\n\
                    [prices.\"my-model\"]\ninput = 1\ncached_input = 1\ncache_write = 1\noutput = 1\n";
        let prices = load(table(text)).expect("loads");
        let tokens = TokenCounts { input: 1_000_000, output: 0, cache_read: 0, cache_write: 0 };
        assert_eq!(prices.cost_micros("claude-opus-5-5", &tokens), Some(1_000_000));
        assert_eq!(prices.cost_micros("my-model", &tokens), Some(1_000_000));
        assert!(prices.price("gpt-6-astra").is_some(), "the other defaults stay");
    }

    #[test]
    fn a_bad_price_names_the_figure() {
        let missing = load(table("[prices.m]\ninput = 1.0\n")).expect_err("refused");
        assert_eq!(missing.var, "prices.m");
        let negative =
            load(table("[prices.m]\ninput = -1.0\ncached_input = 0\ncache_write = 0\noutput = 0\n")).expect_err("refused");
        assert_eq!(negative.var, "prices.m.input");
        let unknown = load(table("[prices.m]\ninput = 1\ncached_input = 0\ncache_write = 0\noutput = 0\nimages = 3\n"));
        assert_eq!(unknown.expect_err("refused").var, "prices.m");
    }
}
