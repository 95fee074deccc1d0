//! The HTTP client webhook deliveries use: names resolved through the
//! endpoints' [`Lookup`] and every answer checked against the target
//! [`Policy`] (a name with any non-public address is refused), so the
//! address a request connects to is the one that was checked, at that
//! delivery. No redirects are followed, no proxy is used.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flotilla_queue::webhooks::target::{Lookup, Policy, Refusal};
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The delivery client's DNS: every answer of the [`Lookup`] checked; a
/// name with any non-public address is refused.
#[derive(Clone)]
pub struct PublicResolver {
    pub policy: Policy,
    pub lookup: Arc<dyn Lookup>,
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
            let found: Vec<SocketAddr> = this.lookup.lookup(&host).await?.into_iter().map(|ip| SocketAddr::new(ip, 0)).collect();
            let vetted = this.vet(&host, found)?;
            Ok(Box::new(vetted.into_iter()) as Addrs)
        })
    }
}

/// The HTTP client deliveries use: names resolved by `lookup` and checked,
/// no redirects, no proxy.
pub fn client(policy: Policy, lookup: Arc<dyn Lookup>, timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .dns_resolver(Arc::new(PublicResolver { policy, lookup }))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(timeout)
        .connect_timeout(timeout)
        .user_agent("flotilla-webhooks")
        .build()
}

#[cfg(test)]
mod tests {
    use flotilla_queue::webhooks::target::ScriptedLookup;

    use super::*;

    const STRICT: Policy = Policy { allow_http: false, allow_private: false };

    /// A name that answers public first and private later: the resolver the
    /// client connects through checks every answer, so the second is refused.
    #[tokio::test]
    async fn a_name_that_turns_private_is_refused_by_the_resolver_the_client_connects_through() {
        let script = ScriptedLookup::new(&[&["93.184.216.34"], &["127.0.0.1"]]);
        let resolver = PublicResolver { policy: STRICT, lookup: Arc::new(script) };
        let name = |host: &str| host.parse::<Name>().expect("name");
        let first: Vec<SocketAddr> = resolver.resolve(name("rebind.example")).await.expect("public").collect();
        assert_eq!(first, vec!["93.184.216.34:0".parse::<SocketAddr>().expect("addr")]);
        let refused = resolver.resolve(name("rebind.example")).await.err().expect("refused");
        assert_eq!(refused.to_string(), "127.0.0.1 is a loopback address; only public addresses are allowed");
        let mixed = vec!["93.184.216.34:443".parse().expect("addr"), "127.0.0.1:443".parse().expect("addr")];
        assert!(resolver.vet("mixed.example", mixed).is_err());
    }
}
