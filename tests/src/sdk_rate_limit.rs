//! What both SDKs' rate-limit checks (`tests/sdk/flotilla_rate_limit.*`)
//! must show against a tenant allowed one submit a second: a refused submit
//! sent again no sooner than `Retry-After`, then accepted; and a client
//! whose one retry is refused too raising the typed error with the API's
//! code after exactly two requests.

use serde_json::Value;

/// The tenant settings the checks run under.
pub const ONE_SUBMIT_A_SECOND: &str = "[tenants.acme]\nrate = { per_second = 1.0, burst = 1 }\n";

/// Each response a client saw: `[status, seconds on a monotonic clock, Retry-After]`.
fn responses(client: &Value) -> Vec<(u64, f64, Option<f64>)> {
    client["responses"]
        .as_array()
        .unwrap_or_else(|| panic!("no responses: {client}"))
        .iter()
        .map(|r| (r[0].as_u64().expect("status"), r[1].as_f64().expect("time"), r[2].as_str().and_then(|s| s.parse().ok())))
        .collect()
}

/// Asserts that every retry came no sooner than the `Retry-After` of the 429 before it.
fn retried_after_retry_after(seen: &[(u64, f64, Option<f64>)], client: &Value) {
    for pair in seen.windows(2) {
        let (status, at, retry_after) = pair[0];
        if status != 429 {
            continue;
        }
        let wait = retry_after.unwrap_or_else(|| panic!("a 429 without Retry-After: {client}"));
        assert!(pair[1].1 - at >= wait - 0.05, "retried {:.3} s after a Retry-After of {wait}: {client}", pair[1].1 - at);
    }
}

/// Checks one JSON line of a rate-limit check; `error_type` is the SDK's name of its 429 error.
pub fn check(report: &Value, error_type: &str) {
    let patient = &report["patient"];
    let seen = responses(patient);
    let statuses: Vec<u64> = seen.iter().map(|r| r.0).collect();
    assert_eq!(statuses, [202, 429, 202], "the second submit is refused, then accepted on its retry: {patient}");
    retried_after_retry_after(&seen, patient);
    assert!(patient["accepted"].as_str().is_some_and(|id| id.starts_with("tsk_")), "{patient}");

    let racing = report["racing"].as_array().expect("racing clients");
    let refused: Vec<&Value> = racing.iter().filter(|c| c.get("error").is_some()).collect();
    assert!(!refused.is_empty(), "one token for three clients leaves some refused: {report}");
    assert!(racing.len() - refused.len() <= 1, "one token is taken once: {report}");
    for client in refused {
        assert_eq!(client["error"], error_type, "{client}");
        assert_eq!(client["code"], "rate_limited", "the API's code: {client}");
        assert_eq!(client["status"], 429, "{client}");
        let seen = responses(client);
        assert_eq!(seen.iter().map(|r| r.0).collect::<Vec<_>>(), [429, 429], "one retry, then the error: {client}");
        retried_after_retry_after(&seen, client);
    }
}
