//! The deployment files agree with the code: every environment variable the
//! manifests and the compose file set is one the configuration reads, every
//! file parses, the KEDA triggers name the streams and group the workers
//! really read, and the workers' grace period covers their drain deadline.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flotilla_shared::config::KNOWN_VARS;
use yaml_rust2::{Yaml, YamlLoader};

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// Every YAML document of every manifest, with the file it came from.
fn documents() -> Vec<(String, Yaml)> {
    let mut files: Vec<PathBuf> =
        std::fs::read_dir(deploy_dir().join("k8s")).expect("deploy/k8s").map(|e| e.expect("entry").path()).collect();
    files.push(deploy_dir().join("compose.yaml"));
    files.sort();
    let mut docs = Vec::new();
    for file in files.iter().filter(|f| f.extension().is_some_and(|e| e == "yaml")) {
        let text = std::fs::read_to_string(file).expect("readable");
        let parsed = YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
        assert!(!parsed.is_empty(), "{} is empty", file.display());
        docs.extend(parsed.into_iter().map(|d| (file.display().to_string(), d)));
    }
    docs
}

fn kind(doc: &Yaml) -> &str {
    doc["kind"].as_str().unwrap_or("")
}

fn containers(doc: &Yaml) -> Vec<&Yaml> {
    doc["spec"]["template"]["spec"]["containers"].as_vec().map(|v| v.iter().collect()).unwrap_or_default()
}

/// The environment variable names a document sets.
fn env_names(doc: &Yaml) -> Vec<String> {
    let mut names = Vec::new();
    for container in containers(doc) {
        for var in container["env"].as_vec().into_iter().flatten() {
            names.extend(var["name"].as_str().map(str::to_owned));
        }
    }
    if kind(doc) == "ConfigMap" && doc["metadata"]["name"].as_str() == Some("flotilla-config") {
        names.extend(doc["data"].as_hash().into_iter().flatten().filter_map(|(k, _)| k.as_str().map(str::to_owned)));
    }
    for (name, service) in doc["services"].as_hash().into_iter().flatten() {
        if matches!(name.as_str(), Some("api" | "worker")) {
            names.extend(
                service["environment"].as_hash().into_iter().flatten().filter_map(|(k, _)| k.as_str().map(str::to_owned)),
            );
        }
    }
    names
}

#[test]
fn every_variable_the_deployment_sets_is_one_the_configuration_reads() {
    let known: BTreeSet<&str> = KNOWN_VARS.iter().map(|(var, _)| *var).collect();
    let mut seen = 0;
    for (file, doc) in documents() {
        for name in env_names(&doc) {
            seen += 1;
            let standard_aws = name.starts_with("AWS_");
            assert!(known.contains(name.as_str()) || standard_aws, "{file} sets {name}, which the configuration does not read");
        }
    }
    assert!(seen >= 10, "the manifests set the fleet's variables ({seen} seen)");
}

#[test]
fn keda_scales_on_the_fleet_backlog_the_api_reports() {
    let docs = documents();
    let scaled = docs.iter().find(|(_, d)| kind(d) == "ScaledObject").expect("a KEDA ScaledObject");
    let triggers = scaled.1["spec"]["triggers"].as_vec().expect("triggers");
    assert_eq!(triggers.len(), 1);
    assert_eq!(triggers[0]["type"].as_str(), Some("prometheus"));
    let query = triggers[0]["metadata"]["query"].as_str().expect("query");
    assert!(query.contains("flotilla_queue_depth"), "scales on the metric the API serves: {query}");
    let fleet = flotilla_shared::queue::FleetStats { queued: 3, ..Default::default() };
    assert!(flotilla_api::metrics::render(&fleet).contains("\nflotilla_queue_depth 3\n"), "the API serves it");
    assert_eq!(scaled.1["spec"]["scaleTargetRef"]["name"].as_str(), Some("flotilla-worker"));
}

#[test]
fn the_workers_grace_period_outlasts_their_drain_deadline() {
    let docs = documents();
    let worker = docs
        .iter()
        .find(|(_, d)| kind(d) == "Deployment" && d["metadata"]["name"].as_str() == Some("flotilla-worker"))
        .expect("worker Deployment");
    let grace = worker.1["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as_i64().expect("grace period");
    let drain: i64 = containers(&worker.1)[0]["env"]
        .as_vec()
        .expect("env")
        .iter()
        .find(|v| v["name"].as_str() == Some("FLOTILLA_DRAIN_DEADLINE_S"))
        .and_then(|v| v["value"].as_str())
        .and_then(|v| v.parse().ok())
        .expect("drain deadline set");
    assert!(grace > drain, "grace {grace}s must exceed the drain deadline {drain}s");
}

#[test]
fn the_api_and_the_workers_have_probes_on_their_health_endpoints() {
    let docs = documents();
    for name in ["flotilla-api", "flotilla-worker"] {
        let deployment = docs
            .iter()
            .find(|(_, d)| kind(d) == "Deployment" && d["metadata"]["name"].as_str() == Some(name))
            .expect("Deployment");
        let container = containers(&deployment.1)[0];
        assert_eq!(container["livenessProbe"]["httpGet"]["path"].as_str(), Some("/healthz"), "{name}");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"].as_str(), Some("/readyz"), "{name}");
    }
}

#[test]
fn redis_keeps_accepted_tasks() {
    let conf = std::fs::read_to_string(deploy_dir().join("redis.conf")).expect("deploy/redis.conf");
    for setting in ["appendonly yes", "maxmemory-policy noeviction"] {
        assert!(conf.lines().any(|l| l.trim() == setting), "deploy/redis.conf lacks {setting:?}");
    }
    let docs = documents();
    let k8s =
        docs.iter().find(|(_, d)| d["metadata"]["name"].as_str() == Some("flotilla-redis-config")).expect("redis ConfigMap");
    let text = k8s.1["data"]["redis.conf"].as_str().expect("redis.conf");
    assert!(text.contains("appendonly yes") && text.contains("maxmemory-policy noeviction"));
}
