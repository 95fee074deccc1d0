//! Every benchmark answers `--help` with its usage, starting with its own
//! name; those that share the flag convention answer a flag without its
//! value or an unknown one with one line naming it and status 2, before
//! they start anything.
//!
//! Run with `cargo nextest run -p flotilla-benches` (the test command leaves
//! this crate out, so it never builds the benchmarks).

use std::process::{Command, Output};

/// Each benchmark, and a flag that takes a value, for those whose bad flags
/// end in one line and status 2.
const BENCHES: [(&str, &str, Option<&str>); 7] = [
    ("flotilla-bench", env!("CARGO_BIN_EXE_flotilla-bench"), Some("--rounds")),
    ("flotilla-archive-bench", env!("CARGO_BIN_EXE_flotilla-archive-bench"), Some("--tasks")),
    ("flotilla-webhook-bench", env!("CARGO_BIN_EXE_flotilla-webhook-bench"), Some("--tasks")),
    ("flotilla-screenshot-bench", env!("CARGO_BIN_EXE_flotilla-screenshot-bench"), None),
    ("flotilla-step-bench", env!("CARGO_BIN_EXE_flotilla-step-bench"), Some("--steps")),
    ("flotilla-pool-bench", env!("CARGO_BIN_EXE_flotilla-pool-bench"), Some("--samples")),
    ("flotilla-cost-bench", env!("CARGO_BIN_EXE_flotilla-cost-bench"), Some("--steps")),
];

fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary).args(args).output().expect("binary runs")
}

#[test]
fn every_benchmark_prints_its_usage_under_its_own_name() {
    for (name, binary, _) in BENCHES {
        let help = run(binary, &["--help"]);
        assert!(help.status.success(), "{name} --help exits {:?}", help.status);
        assert!(String::from_utf8_lossy(&help.stdout).starts_with(&format!("{name} ")), "{name} --help prints its usage");
    }
}

#[test]
fn a_bad_flag_is_named_in_one_line() {
    for (name, binary, flag) in BENCHES {
        let Some(flag) = flag else { continue };
        let missing = run(binary, &[flag]);
        let stderr = String::from_utf8_lossy(&missing.stderr);
        assert_eq!(missing.status.code(), Some(2), "{name} {flag} without a value");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: one line, got {stderr:?}");
        assert!(stderr.contains(&format!("{flag} needs a value")), "{name}: {stderr:?}");

        let unknown = run(binary, &["--frobnicate", "1"]);
        let stderr = String::from_utf8_lossy(&unknown.stderr);
        assert_eq!(unknown.status.code(), Some(2), "{name} with an unknown flag");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{name}: one line, got {stderr:?}");
        assert!(stderr.contains("--frobnicate"), "{name}: {stderr:?}");
    }
}
