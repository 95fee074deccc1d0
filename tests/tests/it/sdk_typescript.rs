//! The TypeScript SDK (`sdk/typescript`, `@flotilla/sdk`), compiled with
//! `tsc` as `npm run build` compiles it and run on the machine's Node against
//! a local fleet: its README's examples run verbatim and print what they
//! promise; a tenant's rate limit is retried after `Retry-After` and then
//! surfaces as `RateLimitError` with the API's code; and its own unit tests
//! (`node:test`, against the built package) pass.

use std::path::Path;

use flotilla_tests::sdk::{repo_root, run, BuiltTypescript, SdkFleet};
use flotilla_tests::sdk_examples::{check_readme_examples, Sdk};
use flotilla_tests::sdk_rate_limit::{check, ONE_SUBMIT_A_SECOND};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_examples_run_against_a_local_fleet() {
    let built = BuiltTypescript::build().await;
    let fleet = SdkFleet::start("").await;
    check_readme_examples(&Sdk::Typescript(built), &fleet).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limited_submit_is_retried_after_retry_after_then_throws_rate_limit_error() {
    let built = BuiltTypescript::build().await;
    let fleet = SdkFleet::start(ONE_SUBMIT_A_SECOND).await;
    let code = std::fs::read_to_string(repo_root().join("tests/sdk/flotilla_rate_limit.mjs")).expect("the check");
    let script = built.script("rate_limit", &code);
    let ran = run(Path::new("node"), &[&script.to_string_lossy()], &built.dir, &fleet.client_env()).await;
    let report: Value = serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ran.stdout));
    check(&report, "RateLimitError");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_unit_tests_pass() {
    let built = BuiltTypescript::build().await;
    let ran = run(Path::new("node"), &["--test", "test/client.test.mjs"], &built.package, &[]).await;
    assert!(ran.stdout.contains("# fail 0"), "{}", ran.stdout);
}
