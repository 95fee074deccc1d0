//! The API against its own document: schemathesis (a third-party fuzzer,
//! installed by `scripts/setup.sh`) reads `/openapi.json` from a running API
//! and sends it generated requests, valid and invalid, with every check on.
//! Any finding fails the test: a 5xx, an answer the document does not
//! describe, a request the document allows and the server refuses (or the
//! reverse), an undocumented status or content type.
//!
//! Bounded: a fixed seed, 10 examples per operation, and a time limit, so a
//! run takes about a minute and a half on an idle machine (under four on a
//! loaded one, its limit) and two runs send the same requests.
//!
//! Settings beyond the command line are in `tests/schemathesis/schemathesis.toml`:
//! the stateful phase runs with its link inference (an id of one resource
//! fed to another's path is answered 404, as an unknown id is), and a body
//! over its size cap may be refused with the documented 413. The batch
//! schema states how each task merges with `defaults` (see
//! `api/src/openapi/request_rules/batch.rs`).
//!
//! Every operation of the document is run. `POST /mcp` is stated as the
//! JSON-RPC envelope the API checks before the MCP service reads it (what
//! each method's `params` hold is MCP's, answered in JSON-RPC; the official
//! MCP client checks those in `mcp::*`). `POST /v1/batches` states its merge
//! and matrix rules (`batches::the_batch_schema_agrees_with_the_server`
//! checks them against the server on thousands of sampled bodies); the one
//! rule no JSON Schema can state is its cap on the runs a batch plans
//! (tasks × matrix cells × `repeat` × `best_of` ≤ 10 000), which its
//! description gives in words: a plan over it is a batch too large, refused
//! with 413 like a body over its byte cap, which valid data may get. The view
//! WebSocket is not in the document: OpenAPI cannot state an upgrade.

use std::process::Stdio;
use std::time::{Duration, Instant};

use flotilla_tests::python::venv_python;
use flotilla_tests::{spawn_api, test_config, unique_prefix, ApiClient, RedisServer};

/// The most a run may take.
const LIMIT: Duration = Duration::from_secs(230);

#[tokio::test(flavor = "multi_thread")]
async fn schemathesis_finds_no_mismatch_between_the_document_and_the_server() {
    let redis = RedisServer::start();
    // Event streams end after a second, so a generated request for the
    // tenant feed does not hold the run.
    let config = test_config(&redis, &unique_prefix(), &[("FLOTILLA_STREAM_MAX_LIFETIME_S", "1")]);
    let api = spawn_api(config).await;
    let client = ApiClient::new(&api, flotilla_tests::api_key());
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.get("/readyz").await.0 != 200 {
        assert!(Instant::now() < deadline, "the api never became ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Run by the venv's python, so a venv whose scripts name another path
    // (copied with a build dir) still works.
    let python = venv_python();
    let schemathesis = python.with_file_name("schemathesis");
    let settings = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("schemathesis/schemathesis.toml");
    let reports = std::env::temp_dir().join(format!("schemathesis-{}", unique_prefix()));
    std::fs::create_dir_all(&reports).expect("report dir");
    let mut command = tokio::process::Command::new(&python);
    command
        .arg(&schemathesis)
        .arg("--config-file")
        .arg(&settings)
        .arg("run")
        .arg(api.url("/openapi.json"))
        .args(["--checks", "all", "--max-examples", "10", "--seed", "1", "--generation-database", "none"])
        .args(["--request-timeout", "10", "--no-color", "--workers", "1"])
        .arg("--header")
        .arg(format!("Authorization: Bearer {}", flotilla_tests::api_key()))
        .arg("--report-dir")
        .arg(&reports)
        .current_dir(&reports)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(LIMIT, command.output())
        .await
        .unwrap_or_else(|_| panic!("schemathesis ran over {LIMIT:?}"))
        .unwrap_or_else(|e| panic!("{} does not start ({e}): run `bash scripts/setup.sh`", schemathesis.display()));
    let _ = std::fs::remove_dir_all(&reports);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("schemathesis took {:.0?}", started.elapsed());
    assert!(output.status.success(), "schemathesis found mismatches:\n{stdout}\n{stderr}");
    let tested: usize = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("Tested: "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("schemathesis reported no tested operations:\n{stdout}"));
    let total: usize = stdout
        .lines()
        .find_map(|line| line.trim().strip_prefix("Operations:"))
        .and_then(|rest| rest.split('/').nth(1))
        .and_then(|rest| rest.trim().strip_suffix("total"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("schemathesis reported no operation count:\n{stdout}"));
    assert!(total >= 42 && tested == total, "{tested} of {total} operations were tested:\n{stdout}");
    assert!(stdout.lines().any(|line| line.trim() == "✅ Stateful"), "the stateful phase ran and passed:\n{stdout}");
    let cases = stdout.lines().find(|line| line.contains(" generated, ")).unwrap_or_default();
    assert!(cases.contains(" passed") && !cases.contains(" found "), "schemathesis: {cases}\n{stdout}");
}
