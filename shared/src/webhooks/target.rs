//! Where a webhook may be sent: `https://` only (plain `http://` when
//! allowed), and, checked after DNS at each delivery, never a loopback,
//! private, link-local, multicast, unspecified or otherwise non-public
//! address unless allowed. The delivery client connects only to the
//! addresses this check passed ([`PublicResolver`]), so a name that answers
//! public first and private later cannot slip through, and it follows no
//! redirects.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Why a target was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("url is not valid: {0}")]
    Malformed(String),
    #[error("only https:// urls are allowed")]
    NotHttps,
    #[error("{0} is a {1} address; only public addresses are allowed")]
    NotPublic(IpAddr, &'static str),
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
    /// Checks a url's form: it parses, has a host, and its scheme is
    /// allowed. Addresses are checked at each delivery ([`Policy::check_url`]
    /// and [`PublicResolver`]), where a refusal lands in the delivery log.
    pub fn check_form(&self, url: &str) -> Result<reqwest::Url, Refusal> {
        let parsed = reqwest::Url::parse(url).map_err(|e| Refusal::Malformed(e.to_string()))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            _ => return Err(Refusal::NotHttps),
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(Refusal::Malformed("it has no host".into()));
        }
        Ok(parsed)
    }

    /// Checks a url's form (scheme, host) and, when the host is an address,
    /// that address.
    pub fn check_url(&self, url: &str) -> Result<reqwest::Url, Refusal> {
        let parsed = reqwest::Url::parse(url).map_err(|e| Refusal::Malformed(e.to_string()))?;
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
}

/// What kind of non-public address `ip` is; `None` for a public one.
pub fn kind_of(ip: IpAddr) -> Option<&'static str> {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    };
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            if v4.is_loopback() {
                Some("loopback")
            } else if v4.is_private() || (a == 100 && (64..128).contains(&b)) {
                Some("private")
            } else if v4.is_link_local() {
                Some("link-local")
            } else if v4.is_multicast() || v4.is_broadcast() {
                Some("multicast")
            } else if v4.is_unspecified() || a == 0 {
                Some("unspecified")
            } else if v4.is_documentation() || a >= 240 {
                Some("reserved")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if first & 0xfe00 == 0xfc00 {
                Some("private")
            } else {
                None
            }
        }
    }
}

/// The delivery client's DNS: the system resolver, with every answer
/// checked; a name with any non-public address is refused.
#[derive(Debug, Clone)]
pub struct PublicResolver {
    pub policy: Policy,
}

impl PublicResolver {
    /// Checks the addresses a name resolved to.
    pub fn vet(&self, host: &str, addrs: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, Refusal> {
        if addrs.is_empty() {
            return Err(Refusal::NoAddress(host.to_owned()));
        }
        for addr in &addrs {
            self.policy.check_ip(addr.ip())?;
        }
        Ok(addrs)
    }
}

impl Resolve for PublicResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let vetted = this.vet(&host, found)?;
            Ok(Box::new(vetted.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries use: checked DNS, no redirects, no proxy.
pub fn client(policy: Policy, timeout: std::time::Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(PublicResolver { policy }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent("flotilla-webhooks")
        .build()
        .unwrap_or_default()
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
        for url in
            ["https://127.0.0.1/", "https://10.0.0.1/", "https://169.254.169.254/latest", "https://[::1]/", "https://0.0.0.0/"]
        {
            assert!(matches!(STRICT.check_url(url), Err(Refusal::NotPublic(..))), "{url}");
        }
        let open = Policy { allow_http: true, allow_private: true };
        assert!(open.check_url("http://127.0.0.1:9/").is_ok());
    }

    #[test]
    fn every_kind_of_non_public_address_is_named() {
        let kind = |s: &str| kind_of(s.parse().expect("ip"));
        assert_eq!(kind("127.0.0.1"), Some("loopback"));
        assert_eq!(kind("10.0.0.1"), Some("private"));
        assert_eq!(kind("192.168.1.1"), Some("private"));
        assert_eq!(kind("169.254.169.254"), Some("link-local"));
        assert_eq!(kind("224.0.0.1"), Some("multicast"));
        assert_eq!(kind("::1"), Some("loopback"));
        assert_eq!(kind("::ffff:10.0.0.1"), Some("private"));
        assert_eq!(kind("fe80::1"), Some("link-local"));
        assert_eq!(kind("fd00::1"), Some("private"));
        assert_eq!(kind("93.184.216.34"), None);
        assert_eq!(kind("2606:4700::1111"), None);
    }

    /// A name that answers public first and private later: each delivery
    /// checks the answer it connects with, so the second is refused.
    #[test]
    fn a_name_that_turns_private_is_refused_at_the_next_delivery() {
        let resolver = PublicResolver { policy: STRICT };
        let public = vec!["93.184.216.34:443".parse().expect("addr")];
        let private = vec!["10.0.0.1:443".parse().expect("addr")];
        assert!(resolver.vet("rebind.example", public).is_ok());
        let refused = resolver.vet("rebind.example", private).expect_err("refused");
        assert_eq!(refused.to_string(), "10.0.0.1 is a private address; only public addresses are allowed");
        let mixed = vec!["93.184.216.34:443".parse().expect("addr"), "127.0.0.1:443".parse().expect("addr")];
        assert!(resolver.vet("mixed.example", mixed).is_err());
    }
}
