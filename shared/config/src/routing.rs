//! Settings of capability routing: the free labels a worker advertises
//! beside its sandbox provider and pipelines (see [`flotilla_types::route`]).

use std::collections::BTreeSet;

use super::{ConfigError, Settings};
use flotilla_types::task::{check_worker_label, MAX_LABELS};

/// What a worker says it can run beyond its provider and pipelines.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoutingConfig {
    /// `FLOTILLA_WORKER_LABELS=gpu,eu`: tasks whose `requires` names only
    /// these labels may run here.
    pub worker_labels: BTreeSet<String>,
}

impl RoutingConfig {
    pub(super) fn from_settings(s: &Settings) -> Result<Self, ConfigError> {
        let var = "FLOTILLA_WORKER_LABELS";
        let mut worker_labels = BTreeSet::new();
        for label in s.get(var).unwrap_or_default().split(',').map(str::trim).filter(|l| !l.is_empty()) {
            check_worker_label(label).map_err(|problem| ConfigError::new(var, problem))?;
            worker_labels.insert(label.to_owned());
        }
        if worker_labels.len() > MAX_LABELS {
            return Err(ConfigError::new(var, format!("at most {MAX_LABELS} labels")));
        }
        Ok(Self { worker_labels })
    }
}

#[cfg(test)]
mod tests {
    use crate::Config;

    #[test]
    fn worker_labels_are_read_and_a_bad_one_is_named() {
        let config = Config::from_env([("FLOTILLA_WORKER_LABELS", "gpu, eu,gpu")]).expect("config");
        assert_eq!(config.routing.worker_labels.iter().collect::<Vec<_>>(), ["eu", "gpu"]);
        let err = Config::from_env([("FLOTILLA_WORKER_LABELS", "eu,no way")]).expect_err("refused");
        assert_eq!(err.var, "FLOTILLA_WORKER_LABELS");
    }
}
