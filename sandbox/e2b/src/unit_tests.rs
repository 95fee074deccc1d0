//! The client's settings and handles without a server: secrets never
//! print, and the account's settings reach the hosted service unless
//! overridden.

use flotilla_config::Secret;
use flotilla_sandbox::SandboxId;

use super::{E2bConfig, E2bProvider, EnvdAddress};

#[test]
fn sandbox_e2b_secrets_never_print() {
    let config = E2bConfig::hosted(Secret::new("e2b_5ec7e7"), "e2b.app");
    assert!(!format!("{config:?}").contains("5ec7e7"));
    let provider = E2bProvider::new(config).expect("provider");
    let id = SandboxId::parse("i1").expect("id");
    let target = provider.target(&id, Some("token-5ec7e7"), None).expect("target");
    assert!(!format!("{target:?}").contains("5ec7e7"));
    assert_eq!(target.base.as_str(), "https://49983-i1.e2b.app/");
    assert_eq!(target.route_to, None);
}

#[test]
fn without_overrides_the_account_reaches_the_hosted_service_and_bad_urls_are_named() {
    let settings =
        |pairs: &[(&str, &str)]| flotilla_config::Config::from_env(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let config = settings(&[("E2B_DOMAIN", "e2b.example")]).expect("settings");
    let e2b = E2bConfig::for_account(Secret::new("e2b_k"), &config.e2b);
    assert_eq!((e2b.api_url.as_str(), &e2b.envd), ("https://api.e2b.example", &EnvdAddress::SandboxHost));
    let err = settings(&[("E2B_SANDBOX_URL", "localhost:3000")]).expect_err("refused");
    assert_eq!(err.var, "E2B_SANDBOX_URL");
}
