//! The sandbox host's deployment agrees with the code: compose and
//! Kubernetes start `flotilla-sandboxd` with TLS from a private authority,
//! beyond loopback only with TLS, its key and TLS files from Secrets (no
//! defaults), probed on `/health`; in Kubernetes one per node, reached only
//! by workers, which take their desktops from their own node's host at the
//! node's address; its image holds every package its desktops run and
//! builds only its own packages (`deploy.rs`). The certificate script makes
//! a pair the host serves and clients verify.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;

use yaml_rust2::{Yaml, YamlLoader};

use crate::deploy::{containers, deploy_dir, documents, kind};

/// The control plane's and the edge's ports, as the deployment files set them.
const CONTROL_PORT: i64 = 49982;
const EDGE_PORT: i64 = 49983;

/// The one document of `kind` named `name`.
fn manifest(kind_name: &str, name: &str) -> Yaml {
    documents()
        .into_iter()
        .map(|(_, doc)| doc)
        .find(|doc| kind(doc) == kind_name && doc["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind_name} {name}"))
}

/// The compose file's services.
pub(crate) fn compose() -> Yaml {
    let text = std::fs::read_to_string(deploy_dir().join("compose.yaml")).expect("compose.yaml");
    YamlLoader::load_from_str(&text).expect("compose.yaml parses").remove(0)["services"].clone()
}

/// A container's variable `name`: its entry, and where it stands in `env`.
fn env_entry<'a>(container: &'a Yaml, name: &str) -> Option<(usize, &'a Yaml)> {
    container["env"].as_vec()?.iter().enumerate().find(|(_, var)| var["name"].as_str() == Some(name))
}

/// A container's plain value of `name`.
fn env_value<'a>(container: &'a Yaml, name: &str) -> &'a str {
    env_entry(container, name).and_then(|(_, v)| v["value"].as_str()).unwrap_or_else(|| panic!("{name} has no value"))
}

/// The `(Secret, key)` a container's `name` comes from.
fn env_secret(container: &Yaml, name: &str) -> (String, String) {
    let (_, var) = env_entry(container, name).unwrap_or_else(|| panic!("{name} is not set"));
    let from = &var["valueFrom"]["secretKeyRef"];
    assert!(var["value"].is_badvalue(), "{name} has a plain value");
    let field = |f: &str| from[f].as_str().unwrap_or_else(|| panic!("{name} is not from a Secret")).to_owned();
    (field("name"), field("key"))
}

/// Checks that `fieldPath` defines `var` before `use_of` uses it.
fn downward_before(container: &Yaml, var: &str, field_path: &str, use_of: &str) {
    let (at, entry) = env_entry(container, var).unwrap_or_else(|| panic!("{var} is not defined"));
    assert_eq!(entry["valueFrom"]["fieldRef"]["fieldPath"].as_str(), Some(field_path), "{var}");
    let (used, _) = env_entry(container, use_of).unwrap_or_else(|| panic!("{use_of} is not set"));
    assert!(at < used, "{var} is defined before {use_of} uses it");
}

/// The Secret a file at `path` in `pod`'s `container` is mounted from.
fn secret_of_file(pod: &Yaml, container: &Yaml, path: &str) -> String {
    let mount = container["volumeMounts"]
        .as_vec()
        .into_iter()
        .flatten()
        .find(|m| m["mountPath"].as_str().is_some_and(|dir| Path::new(path).parent() == Some(Path::new(dir))))
        .unwrap_or_else(|| panic!("{path} is in no mounted volume"));
    assert_eq!(mount["readOnly"].as_bool(), Some(true), "{path} is mounted read-only");
    let name = mount["name"].as_str().expect("a volume name");
    let volume = pod["volumes"].as_vec().into_iter().flatten().find(|v| v["name"].as_str() == Some(name)).expect("the volume");
    volume["secret"]["secretName"].as_str().unwrap_or_else(|| panic!("{path} is not from a Secret")).to_owned()
}

/// The sandbox host's DaemonSet, its pod spec and its container.
fn daemonset() -> (Yaml, Yaml, Yaml) {
    let daemonset = manifest("DaemonSet", "flotilla-sandboxd");
    let pod = daemonset["spec"]["template"]["spec"].clone();
    let container = containers(&daemonset)[0].clone();
    (daemonset, pod, container)
}

#[test]
fn the_sandbox_host_runs_on_every_node_at_its_address_with_tls_and_key_from_secrets() {
    let (daemonset, pod, container) = daemonset();
    assert_eq!(daemonset["spec"]["template"]["metadata"]["labels"]["app"].as_str(), Some("flotilla-sandboxd"));
    let ports: Vec<(&str, i64, i64)> = container["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .map(|p| {
            (p["name"].as_str().unwrap_or(""), p["containerPort"].as_i64().unwrap_or(0), p["hostPort"].as_i64().unwrap_or(0))
        })
        .collect();
    // The host tells workers its edge's own port, at the address they
    // reached its control plane: the node's ports are the container's.
    assert_eq!(ports, [("control", CONTROL_PORT, CONTROL_PORT), ("edge", EDGE_PORT, EDGE_PORT)], "both at the node's address");
    assert_eq!(env_value(&container, "FLOTILLA_SANDBOXD_ADDR"), format!("$(POD_IP):{CONTROL_PORT}"));
    assert_eq!(env_value(&container, "FLOTILLA_SANDBOXD_EDGE_ADDR"), format!("$(POD_IP):{EDGE_PORT}"));
    downward_before(&container, "POD_IP", "status.podIP", "FLOTILLA_SANDBOXD_ADDR");
    for var in ["FLOTILLA_SANDBOXD_TLS_CERT", "FLOTILLA_SANDBOXD_TLS_KEY"] {
        let secret = secret_of_file(&pod, &container, env_value(&container, var));
        assert_eq!(secret, "flotilla-sandboxd-tls", "{var}");
    }
    assert_eq!(env_secret(&container, "FLOTILLA_SANDBOXD_KEYS"), ("flotilla-secrets".to_owned(), "sandboxd-key".to_owned()));
    for probe in ["livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(
            (get["path"].as_str(), get["port"].as_str(), get["scheme"].as_str()),
            (Some("/health"), Some("control"), Some("HTTPS")),
            "{probe}"
        );
    }
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"].as_bool(), Some(true), "the host is not root");
    assert!(security["runAsUser"].as_i64().is_some_and(|uid| uid != 0), "the host is not root");
}

#[test]
fn workers_reach_the_host_of_their_own_node_and_verify_it_against_the_private_authority() {
    let (_, _, host) = daemonset();
    let deployment = manifest("Deployment", "flotilla-worker");
    let pod = deployment["spec"]["template"]["spec"].clone();
    let worker = containers(&deployment)[0].clone();
    assert_eq!(env_value(&worker, "FLOTILLA_SANDBOX_PROVIDER"), "local");
    assert_eq!(env_value(&worker, "FLOTILLA_SANDBOXD_URL"), format!("https://$(HOST_IP):{CONTROL_PORT}"), "the node's host");
    downward_before(&worker, "HOST_IP", "status.hostIP", "FLOTILLA_SANDBOXD_URL");
    assert_eq!(
        env_secret(&worker, "FLOTILLA_SANDBOXD_KEY"),
        env_secret(&host, "FLOTILLA_SANDBOXD_KEYS"),
        "the key the host takes"
    );
    let authority = secret_of_file(&pod, &worker, env_value(&worker, "FLOTILLA_SANDBOXD_CA_CERT"));
    assert_eq!(authority, "flotilla-sandboxd-ca");
    let mounted: Vec<&str> =
        pod["volumes"].as_vec().into_iter().flatten().filter_map(|v| v["secret"]["secretName"].as_str()).collect();
    assert!(!mounted.contains(&"flotilla-sandboxd-tls"), "no worker holds the host's key: {mounted:?}");
}

/// The `from` entries of a policy's ingress rules.
fn sources(policy: &Yaml) -> Vec<Yaml> {
    policy["spec"]["ingress"]
        .as_vec()
        .into_iter()
        .flatten()
        .flat_map(|rule| rule["from"].as_vec().cloned().unwrap_or_default())
        .collect()
}

#[test]
fn only_the_workers_reach_the_sandbox_hosts_and_the_hosts_reach_no_pod() {
    let policy = manifest("NetworkPolicy", "flotilla-sandboxd-ingress");
    assert_eq!(policy["spec"]["podSelector"]["matchLabels"]["app"].as_str(), Some("flotilla-sandboxd"));
    let rules = policy["spec"]["ingress"].as_vec().expect("ingress rules");
    assert_eq!(rules.len(), 1, "one rule");
    let from = rules[0]["from"].as_vec().expect("a from list");
    assert_eq!(from.len(), 1, "one source: {from:?}");
    let worker = &from[0];
    assert_eq!(worker["podSelector"]["matchLabels"]["app"].as_str(), Some("flotilla-worker"));
    assert!(worker["namespaceSelector"].is_badvalue() && worker["ipBlock"].is_badvalue(), "the workers of this namespace alone");
    let ports: Vec<i64> = rules[0]["ports"].as_vec().into_iter().flatten().filter_map(|p| p["port"].as_i64()).collect();
    assert_eq!(ports, [CONTROL_PORT, EDGE_PORT]);
    // The sandboxes' traffic leaves from the hosts' pods: no policy lets
    // those in anywhere.
    for (file, doc) in documents().iter().filter(|(_, d)| kind(d) == "NetworkPolicy") {
        for source in sources(doc) {
            assert_ne!(
                source["podSelector"]["matchLabels"]["app"].as_str(),
                Some("flotilla-sandboxd"),
                "{file} admits the hosts"
            );
        }
    }
    let egress = manifest("NetworkPolicy", "flotilla-sandboxd-egress");
    assert_eq!(egress["spec"]["podSelector"]["matchLabels"]["app"].as_str(), Some("flotilla-sandboxd"));
    let mut public = false;
    for rule in egress["spec"]["egress"].as_vec().expect("egress rules") {
        for to in rule["to"].as_vec().expect("a to list") {
            if let Some(cidr) = to["ipBlock"]["cidr"].as_str() {
                let except: BTreeSet<&str> =
                    to["ipBlock"]["except"].as_vec().into_iter().flatten().filter_map(Yaml::as_str).collect();
                for private in ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "100.64.0.0/10"] {
                    assert!(except.contains(private), "{cidr} leaves out {private}: {except:?}");
                }
                public = true;
            } else {
                assert_eq!(to["podSelector"]["matchLabels"]["k8s-app"].as_str(), Some("kube-dns"), "no pod but DNS: {to:?}");
                let ports: BTreeSet<i64> =
                    rule["ports"].as_vec().into_iter().flatten().filter_map(|p| p["port"].as_i64()).collect();
                assert_eq!(ports, BTreeSet::from([53]), "DNS only");
            }
        }
    }
    assert!(public, "the sandboxes reach public addresses");
}

/// Compose's `${VAR:?…}` interpolation of `value`: the variable's name.
fn interpolated(value: &str) -> Option<&str> {
    value.strip_prefix("${")?.split(":?").next()
}

#[test]
fn compose_starts_the_host_before_the_workers_with_tls_from_a_one_shot_authority() {
    let services = compose();
    let (certs, host, worker) = (&services["sandboxd-certs"], &services["sandboxd"], &services["worker"]);
    let host_env = &host["environment"];
    let worker_env = &worker["environment"];
    assert_eq!(worker_env["FLOTILLA_SANDBOX_PROVIDER"].as_str(), Some("local"));
    let url = worker_env["FLOTILLA_SANDBOXD_URL"].as_str().expect("the host's URL");
    let port = host_env["FLOTILLA_SANDBOXD_ADDR"].as_str().and_then(|a| a.parse::<SocketAddr>().ok()).expect("an address").port();
    assert_eq!(url, format!("https://sandboxd:{port}"), "the host's service, on its control plane's port");
    let key = |env: &Yaml, var: &str| interpolated(env[var].as_str().unwrap_or("")).map(str::to_owned);
    assert_eq!(key(worker_env, "FLOTILLA_SANDBOXD_KEY"), Some("FLOTILLA_SANDBOXD_KEY".into()), "no default");
    assert_eq!(key(host_env, "FLOTILLA_SANDBOXD_KEYS"), key(worker_env, "FLOTILLA_SANDBOXD_KEY"), "the key the host takes");

    // The one-shot writes the host's pair into one volume and the
    // authority into another; the workers mount only the second.
    let args: Vec<&str> = certs["command"].as_vec().expect("a command").iter().filter_map(Yaml::as_str).collect();
    assert!(args.contains(&"DNS:sandboxd"), "the certificate names the host's service: {args:?}");
    let positional: Vec<&str> = match args.get(1..) {
        Some(["--key-owner", _, rest @ ..]) | Some(rest) => rest.to_vec(),
        None => Vec::new(),
    };
    let [tls_dir, ca_dir, ..] = positional[..] else { panic!("the one-shot names two directories: {args:?}") };
    let volume_at = |service: &Yaml, dir: &str| -> Option<String> {
        service["volumes"].as_vec()?.iter().filter_map(Yaml::as_str).find_map(|v| {
            let mut parts = v.split(':');
            let (volume, path) = (parts.next()?, parts.next()?);
            (Path::new(dir).starts_with(path)).then(|| volume.to_owned())
        })
    };
    let tls_volume = volume_at(certs, tls_dir).expect("the pair's volume");
    let ca_volume = volume_at(certs, ca_dir).expect("the authority's volume");
    for var in ["FLOTILLA_SANDBOXD_TLS_CERT", "FLOTILLA_SANDBOXD_TLS_KEY"] {
        assert_eq!(volume_at(host, host_env[var].as_str().expect(var)), Some(tls_volume.clone()), "{var}");
    }
    let ca_cert = worker_env["FLOTILLA_SANDBOXD_CA_CERT"].as_str().expect("the authority's file");
    assert_eq!(volume_at(worker, ca_cert), Some(ca_volume), "the workers trust the one-shot's authority");
    let worker_volumes = worker["volumes"].as_vec().cloned().unwrap_or_default();
    assert!(
        worker_volumes.iter().all(|v| !v.as_str().unwrap_or("").starts_with(&format!("{tls_volume}:"))),
        "no worker holds the host's key"
    );

    assert_eq!(worker["depends_on"]["sandboxd"]["condition"].as_str(), Some("service_healthy"));
    assert_eq!(host["depends_on"]["sandboxd-certs"]["condition"].as_str(), Some("service_completed_successfully"));
    let check: Vec<&str> =
        host["healthcheck"]["test"].as_vec().expect("a health check").iter().filter_map(Yaml::as_str).collect();
    assert!(check.contains(&format!("https://localhost:{port}/health").as_str()), "{check:?}");
    assert!(args.contains(&"DNS:localhost"), "the health check's name is in the certificate: {args:?}");
    let cacert = check.iter().position(|a| *a == "--cacert").and_then(|at| check.get(at + 1)).expect("verified");
    assert!(volume_at(host, cacert).is_some(), "against the one-shot's authority");
}

/// What the runtime must allow the jail, and nothing more: compose lowers
/// seccomp, AppArmor and the /proc masks and passes /dev/net/tun, adds no
/// capability and keeps the image's user; Kubernetes, which has no narrower
/// way to pass the device and unmask /proc, runs it privileged but not as
/// root. The image's user is not root and keeps no setuid program.
#[test]
fn the_host_runs_its_jail_without_root_and_with_only_what_the_jail_needs() {
    let services = compose();
    let host = &services["sandboxd"];
    let options: BTreeSet<&str> = host["security_opt"].as_vec().expect("security_opt").iter().filter_map(Yaml::as_str).collect();
    assert_eq!(options, BTreeSet::from(["seccomp=unconfined", "apparmor=unconfined", "systempaths=unconfined"]));
    let devices: Vec<&str> = host["devices"].as_vec().expect("devices").iter().filter_map(Yaml::as_str).collect();
    assert_eq!(devices, ["/dev/net/tun:/dev/net/tun"]);
    for absent in ["privileged", "cap_add", "user", "network_mode", "pid"] {
        assert!(host[absent].is_badvalue(), "compose's sandbox host sets {absent}");
    }
    let (_, _, container) = daemonset();
    assert_eq!(container["securityContext"]["privileged"].as_bool(), Some(true));
    let stage = dockerfile_stage("sandboxd");
    assert!(stage.lines().any(|l| l.trim() == "USER 10001"), "the image runs as its own user:\n{stage}");
    assert!(stage.contains("-perm /6000") && stage.contains("chmod ug-s"), "no setuid or setgid program is left");
    assert!(!stage.contains("FLOTILLA_SANDBOXD_ADDR"), "the image sets no address: the manifests do, beside TLS");
}

/// The text of the Dockerfile's stage `name`, continuation lines joined.
fn dockerfile_stage(name: &str) -> String {
    let text = std::fs::read_to_string(deploy_dir().join("Dockerfile")).expect("deploy/Dockerfile").replace("\\\n", " ");
    let header = format!(" AS {name}");
    let start =
        text.lines().position(|l| l.starts_with("FROM ") && l.ends_with(&header)).unwrap_or_else(|| panic!("no stage {name}"));
    text.lines().skip(start).take_while(|l| !l.starts_with("FROM ") || l.ends_with(&header)).collect::<Vec<_>>().join("\n")
}

/// The entries of the array `name` in `scripts/setup.sh`: a package, or a
/// `command:package` pair.
pub(crate) fn setup_list(name: &str) -> Vec<String> {
    let path = deploy_dir().join("../scripts/setup.sh");
    let setup = std::fs::read_to_string(path).expect("scripts/setup.sh");
    let body = setup.split(&format!("\n{name}=(")).nth(1).and_then(|rest| rest.split("\n)").next()).expect(name);
    body.lines().map(str::trim).filter(|l| l.starts_with('"')).map(|l| l.trim_matches('"').to_owned()).collect()
}

#[test]
fn the_sandbox_hosts_image_has_every_package_its_desktops_run_and_both_its_programs() {
    let stage = dockerfile_stage("sandboxd");
    let install = stage.lines().find(|l| l.contains("apt-get install")).expect("an apt-get install");
    let installed: BTreeSet<&str> = install.split_whitespace().collect();
    let mut needed = BTreeSet::new();
    for entry in setup_list("DESKTOP_APT_TOOLS").into_iter().chain(setup_list("DESKTOP_APT_PACKAGES")) {
        needed.insert(entry.rsplit(':').next().unwrap_or(&entry).to_owned());
    }
    assert!(needed.len() > 20, "set-up's desktop lists were read: {needed:?}");
    let config = flotilla_config::Config::from_env([("FLOTILLA_API_KEYS", "")]).expect("defaults");
    let templates: Vec<String> = config.templates.iter().flat_map(|t| t.packages.clone()).collect();
    assert!(templates.iter().any(|p| p == "chromium") && templates.iter().any(|p| p == "libreoffice-writer"), "{templates:?}");
    needed.extend(templates);
    let missing: Vec<&String> = needed.iter().filter(|p| !installed.contains(p.as_str())).collect();
    assert!(missing.is_empty(), "the sandbox host's image lacks {missing:?}");
    let copied = stage.lines().find(|l| l.starts_with("COPY --from=build-sandboxd")).expect("the programs are copied");
    for program in ["flotilla-sandboxd", "flotilla-spawner"] {
        assert!(copied.contains(&format!("/release/{program} ")), "{program} is in the image: {copied}");
    }
}

/// Whether a listen address given in a deployment file is a loopback one.
fn loopback(addr: &str) -> bool {
    addr.parse::<SocketAddr>().is_ok_and(|a| a.ip().is_loopback())
}

/// Finding: a host that listens beyond loopback must speak TLS. Wherever a
/// deployment file gives the host an address beyond loopback, it gives it
/// a certificate and key too; the compose environment, read by the typed
/// configuration, is a host with TLS and a key.
#[test]
fn the_sandbox_host_listens_beyond_loopback_only_with_tls() {
    let services = compose();
    let compose_env: Vec<(String, String)> = services["sandboxd"]["environment"]
        .as_hash()
        .expect("environment")
        .iter()
        .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), v.as_str()?.to_owned())))
        .collect();
    let (_, _, container) = daemonset();
    let k8s_env: Vec<(String, String)> = container["env"]
        .as_vec()
        .expect("env")
        .iter()
        .filter_map(|v| Some((v["name"].as_str()?.to_owned(), v["value"].as_str().unwrap_or("(a Secret)").to_owned())))
        .collect();
    let mut beyond = 0;
    for (file, env) in [("compose.yaml", &compose_env), ("k8s/sandboxd.yaml", &k8s_env)] {
        let get = |var: &str| env.iter().find(|(k, _)| k == var).map(|(_, v)| v.as_str());
        for var in ["FLOTILLA_SANDBOXD_ADDR", "FLOTILLA_SANDBOXD_EDGE_ADDR"] {
            let addr = get(var).unwrap_or("127.0.0.1:0");
            if !loopback(addr) {
                beyond += 1;
                for tls in ["FLOTILLA_SANDBOXD_TLS_CERT", "FLOTILLA_SANDBOXD_TLS_KEY"] {
                    assert!(get(tls).is_some_and(|path| path.starts_with('/')), "{file}: {var}={addr} without {tls}");
                }
            }
        }
    }
    assert_eq!(beyond, 4, "both files serve both listeners beyond loopback");
    let key = format!("e2b_{:032x}", rand::random::<u128>());
    let env = compose_env.into_iter().map(|(k, v)| if interpolated(&v).is_some() { (k, key.clone()) } else { (k, v) });
    let config = flotilla_config::Config::from_env(env).expect("compose's environment is a valid configuration");
    let host = &config.sandboxd;
    assert!(!host.addr.ip().is_loopback() && host.tls.is_some(), "beyond loopback with TLS: {host:?}");
    host.require_keys().expect("a key");
    assert!(host.accepts(&key));
}
