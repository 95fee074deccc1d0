//! Where a webhook may be sent: `https://` only (plain `http://` when
//! allowed), and never a loopback, private, link-local, multicast,
//! unspecified or otherwise non-public address ([`super::address`]) unless
//! allowed. An endpoint's url is checked when it is made or changed
//! ([`Policy::vet_target`]), and again at each delivery: the worker's
//! delivery client resolves names only through a resolver that checks every
//! answer with [`Policy::check_ip`], so a name that answered public when the
//! endpoint was made and private later is refused then. Name lookups go
//! through [`Lookup`], the system's resolver unless another is given (tests
//! script one).

use std::net::IpAddr;
use std::time::Duration;

use futures::future::BoxFuture;

use flotilla_types::address::{kind_of, AddressKind};

/// How long a lookup made to check a new endpoint may take; past it, the
/// endpoint is kept and its address checked at each delivery.
const CREATE_LOOKUP_LIMIT: Duration = Duration::from_secs(3);

/// Resolves a host name to its addresses.
pub trait Lookup: Send + Sync {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>>;
}

/// The system's resolver (`getaddrinfo`).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup<'a>(&'a self, host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, 0)).await?.map(|addr| addr.ip()).collect()) })
    }
}

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("url is not valid: {0}")]
    Malformed(String),
    #[error("only https:// urls are allowed")]
    NotHttps,
    #[error("{0} is a {1} address; only public addresses are allowed")]
    NotPublic(IpAddr, AddressKind),
    #[error("{0} does not resolve")]
    NoAddress(String),
}

/// What a webhook's url may be, as configured.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub allow_http: bool,
    pub allow_private: bool,
}

impl Policy {
    /// Checks a url's form (scheme, host) and, when the host is an address,
    /// that address.
    pub fn check_url(&self, url: &str) -> Result<url::Url, Refusal> {
        let parsed = url::Url::parse(url).map_err(|e| Refusal::Malformed(e.to_string()))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(Refusal::NotHttps),
        }
        let host = parsed.host_str().ok_or_else(|| Refusal::Malformed("it has no host".into()))?;
        if let Ok(ip) = host.trim_start_matches('[').trim_end_matches(']').parse::<IpAddr>() {
            self.check_ip(ip)?;
        }
        Ok(parsed)
    }

    /// Refuses a non-public address unless private targets are allowed.
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refusal> {
        match (self.allow_private, kind_of(ip)) {
            (false, Some(kind)) => Err(Refusal::NotPublic(ip, kind)),
            _ => Ok(()),
        }
    }

    /// Checks a new or changed endpoint's url: its form, its address when
    /// it is one, and the addresses its name resolves to now. A name that
    /// does not resolve (or not within [`CREATE_LOOKUP_LIMIT`]) is kept: its
    /// addresses are checked at each delivery anyway.
    pub async fn vet_target(&self, url: &str, lookup: &dyn Lookup) -> Result<(), Refusal> {
        let parsed = self.check_url(url)?;
        let host = parsed.host_str().unwrap_or_default();
        if self.allow_private || host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
            return Ok(());
        }
        match tokio::time::timeout(CREATE_LOOKUP_LIMIT, lookup.lookup(host)).await {
            Ok(Ok(found)) => found.into_iter().try_for_each(|ip| self.check_ip(ip)),
            Ok(Err(_)) | Err(_) => Ok(()),
        }
    }
}

/// A [`Lookup`] that answers every host from a script, one answer per
/// lookup, the last one again once the script runs out (tests: the
/// `testing` feature).
#[cfg(any(test, feature = "testing"))]
pub struct ScriptedLookup(std::sync::Mutex<Vec<Vec<IpAddr>>>);

#[cfg(any(test, feature = "testing"))]
impl ScriptedLookup {
    /// # Panics
    /// When the script is empty or names something that is no address.
    pub fn new(answers: &[&[&str]]) -> Self {
        assert!(!answers.is_empty(), "a script has an answer");
        let parse = |list: &&[&str]| list.iter().map(|ip| ip.parse().expect("an address")).collect();
        Self(std::sync::Mutex::new(answers.iter().map(parse).collect()))
    }
}

#[cfg(any(test, feature = "testing"))]
impl Lookup for ScriptedLookup {
    fn lookup<'a>(&'a self, _host: &'a str) -> BoxFuture<'a, std::io::Result<Vec<IpAddr>>> {
        let mut answers = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let answer = if answers.len() > 1 { answers.remove(0) } else { answers[0].clone() };
        Box::pin(async move { Ok(answer) })
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    const STRICT: Policy = Policy { allow_http: false, allow_private: false };

    #[test]
    fn only_https_and_public_literal_addresses_pass() {
        assert!(STRICT.check_url("https://example.com/hook").is_ok());
        assert_eq!(STRICT.check_url("http://example.com/hook"), Err(Refusal::NotHttps));
        assert_eq!(STRICT.check_url("ftp://example.com/hook"), Err(Refusal::NotHttps));
        for url in [
            "https://127.0.0.1/",
            "https://10.0.0.1/",
            "https://169.254.169.254/latest",
            "https://[::1]/",
            "https://0.0.0.0/",
            "https://[::ffff:127.0.0.1]/",
            "https://[::7f00:1]/",
            "https://[64:ff9b::a00:1]/",
            "https://[2002:7f00:1::]/",
            "https://2130706433/",
            "https://0x7f.1/",
        ] {
            assert!(matches!(STRICT.check_url(url), Err(Refusal::NotPublic(..))), "{url}");
        }
        let open = Policy { allow_http: true, allow_private: true };
        assert!(open.check_url("http://127.0.0.1:9/").is_ok());
    }

    #[tokio::test]
    async fn a_new_endpoint_is_refused_when_its_name_resolves_private_and_kept_when_it_does_not_resolve() {
        let private = ScriptedLookup::new(&[&["93.184.216.34", "10.1.2.3"]]);
        let refused = STRICT.vet_target("https://hooks.example/", &private).await.expect_err("refused");
        assert_eq!(refused.to_string(), "10.1.2.3 is a private address; only public addresses are allowed");
        let public = ScriptedLookup::new(&[&["93.184.216.34"]]);
        assert_eq!(STRICT.vet_target("https://hooks.example/", &public).await, Ok(()));
        assert_eq!(STRICT.vet_target("https://hooks.example/", &SystemLookup).await.ok(), Some(()), "unresolvable is kept");
        let literal = STRICT.vet_target("https://[::ffff:169.254.169.254]/", &public).await.expect_err("refused");
        assert!(matches!(literal, Refusal::NotPublic(_, AddressKind::LinkLocal)), "{literal}");
    }
}
