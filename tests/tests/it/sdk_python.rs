//! The Python SDK (`sdk/python`, imported as `flotilla`) against a local
//! fleet: its README's examples run verbatim and print what they promise;
//! a tenant's rate limit is retried after `Retry-After` and then surfaces
//! as `RateLimitError` with the API's code; and its own unit tests pass
//! (pytest, in the project's venv).

use flotilla_tests::sdk::{python, python_env, python_sdk_dir, repo_root, run, SdkFleet};
use flotilla_tests::sdk_examples::{check_readme_examples, Sdk};
use flotilla_tests::sdk_rate_limit::{check, ONE_SUBMIT_A_SECOND};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread")]
async fn the_readme_examples_run_against_a_local_fleet() {
    let fleet = SdkFleet::start("").await;
    check_readme_examples(&Sdk::Python, &fleet).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limited_submit_is_retried_after_retry_after_then_raises_rate_limit_error() {
    let fleet = SdkFleet::start(ONE_SUBMIT_A_SECOND).await;
    let script = repo_root().join("tests/sdk/flotilla_rate_limit.py");
    let sdk = python_sdk_dir();
    let args = [script.to_string_lossy().into_owned(), sdk.to_string_lossy().into_owned()];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let ran = run(&python(), &args, &repo_root(), &python_env(&fleet.client_env())).await;
    let report: Value = serde_json::from_str(ran.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", ran.stdout));
    check(&report, "RateLimitError");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sdk_unit_tests_pass() {
    let tests = python_sdk_dir().join("tests").to_string_lossy().into_owned();
    let args = ["-m", "pytest", "-q", "-p", "no:cacheprovider", tests.as_str()];
    let ran = run(&python(), &args, &python_sdk_dir(), &[]).await;
    assert!(ran.stdout.contains(" passed"), "{}", ran.stdout);
}
