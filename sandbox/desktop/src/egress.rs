//! Where a sandbox's packets may go. With egress on, the sandbox's network
//! namespace gets an `unreachable` route for every non-public IPv4 range
//! (the one table the webhook guard uses too,
//! [`flotilla_types::address::NON_PUBLIC_V4`]), for every prefix this host
//! is on (so a fleet machine on a public address cannot reach its
//! neighbours), for each of this host's own addresses, and for what the
//! operator denies (`FLOTILLA_SANDBOX_DENY`: the fleet's own services).
//! There is no IPv6 route at all. Explicit exceptions (tests: the stand-in
//! for the internet) are routed out through the user-mode network.

use std::net::Ipv4Addr;
use std::path::Path;
use std::time::Duration;

use flotilla_types::address::NON_PUBLIC_V4;
use tokio::process::Command;

use super::process;
use flotilla_sandbox::SandboxError;

/// Whether a sandbox reaches the internet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Network {
    /// Out through slirp4netns to public addresses only.
    #[default]
    Egress,
    /// No route anywhere: a loopback alone.
    Offline,
}

/// The user-mode network's gateway (slirp4netns' fixed layout).
pub(crate) const SLIRP_GATEWAY: &str = "10.0.2.2";
/// How long reading the host's addresses may take.
const SETUP_TIMEOUT: Duration = Duration::from_secs(10);

/// An IPv4 prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Net {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Ipv4Net {
    /// `a.b.c.d/n` (or a bare address, `/32`), with the host bits cleared.
    pub fn parse(text: &str) -> Option<Self> {
        let (address, prefix) = match text.trim().split_once('/') {
            Some((address, prefix)) => (address, prefix.parse::<u8>().ok().filter(|p| *p <= 32)?),
            None => (text.trim(), 32),
        };
        let address: Ipv4Addr = address.parse().ok()?;
        let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
        Some(Self { network: Ipv4Addr::from(u32::from(address) & mask), prefix })
    }

    fn host(address: Ipv4Addr) -> Self {
        Self { network: address, prefix: 32 }
    }
}

impl std::fmt::Display for Ipv4Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

/// What this host's interfaces say about it: its own addresses and the
/// prefixes they are on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct HostNetwork {
    pub addresses: Vec<Ipv4Addr>,
    pub on_link: Vec<Ipv4Net>,
}

/// The `ip -batch` lines for a sandbox's namespace.
pub(crate) fn route_script(network: Network, host: &HostNetwork, deny: &[Ipv4Net], exceptions: &[Ipv4Addr]) -> String {
    let mut script = String::from("link set lo up\n");
    if network == Network::Offline {
        return script;
    }
    let mut blocked: Vec<Ipv4Net> =
        NON_PUBLIC_V4.iter().map(|(network, prefix, _)| Ipv4Net { network: *network, prefix: *prefix }).collect();
    blocked.extend(host.on_link.iter().filter(|net| !net.network.is_loopback()));
    blocked.extend(host.addresses.iter().filter(|a| !a.is_loopback() && !exceptions.contains(a)).map(|a| Ipv4Net::host(*a)));
    blocked.extend(deny);
    let mut seen = Vec::new();
    for net in blocked {
        let excepted = net.prefix == 32 && exceptions.contains(&net.network);
        if !excepted && !seen.contains(&net) {
            script.push_str(&format!("route add unreachable {net}\n"));
            seen.push(net);
        }
    }
    for address in exceptions {
        script.push_str(&format!("route add {address}/32 via {SLIRP_GATEWAY} dev tap0\n"));
    }
    script
}

/// This host's IPv4 addresses and prefixes, from `ip -o -4 addr show`
/// (none needed offline). Fails closed: what cannot be read cannot be
/// blocked, so a sandbox with egress is not built without them (a host
/// always has its loopback, so an answer without any address is a failure
/// too).
pub(crate) async fn host_network(ip: &Path, network: Network) -> Result<HostNetwork, SandboxError> {
    if network == Network::Offline {
        return Ok(HostNetwork::default());
    }
    let failed = |why: String| {
        SandboxError::Unavailable(format!(
            "cannot read this host's addresses to block them in the sandbox ({} -o -4 addr show: {why})",
            ip.display()
        ))
    };
    let mut command = Command::new(ip);
    command.args(["-o", "-4", "addr", "show"]).env_clear().env("PATH", host_path());
    let output = process::run(command, None, SETUP_TIMEOUT, process::MAX_OUTPUT).await.map_err(|e| failed(e.to_string()))?;
    if output.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(failed(stderr.lines().next().unwrap_or("it failed").to_owned()));
    }
    let found = parse_addresses(&String::from_utf8_lossy(&output.stdout));
    if found.addresses.is_empty() {
        return Err(failed("it named no address".into()));
    }
    Ok(found)
}

/// The `inet a.b.c.d/n` of `ip -o -4 addr show`'s lines.
fn parse_addresses(text: &str) -> HostNetwork {
    let mut host = HostNetwork::default();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        if words.find(|w| *w == "inet").is_none() {
            continue;
        }
        let Some(cidr) = words.next() else { continue };
        let Some(address) = cidr.split('/').next().and_then(|a| a.parse::<Ipv4Addr>().ok()) else { continue };
        host.addresses.push(address);
        if let Some(net) = Ipv4Net::parse(cidr).filter(|net| net.prefix < 32 && !host.on_link.contains(net)) {
            host.on_link.push(net);
        }
    }
    host
}

pub(crate) fn host_path() -> std::ffi::OsString {
    std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Ipv4Addr {
        text.parse().expect("ip")
    }

    #[test]
    fn routes_block_non_public_ranges_the_host_and_its_links_but_not_exceptions() {
        let host = HostNetwork {
            addresses: vec![ip("127.0.0.1"), ip("11.22.33.4"), ip("198.51.100.9")],
            on_link: vec![Ipv4Net::parse("127.0.0.0/8").expect("net"), Ipv4Net::parse("11.22.33.0/24").expect("net")],
        };
        let deny = [Ipv4Net::parse("44.1.2.3").expect("net")];
        let script = route_script(Network::Egress, &host, &deny, &[ip("198.51.100.9")]);
        for blocked in ["10.0.0.0/8", "169.254.0.0/16", "198.51.100.0/24", "192.88.99.0/24", "11.22.33.0/24", "11.22.33.4/32"] {
            assert!(script.contains(&format!("route add unreachable {blocked}\n")), "{blocked} in:\n{script}");
        }
        assert!(script.contains("route add unreachable 44.1.2.3/32\n"), "the operator's deny list");
        assert!(!script.contains("unreachable 198.51.100.9/32"));
        assert_eq!(script.matches("unreachable 127.0.0.0/8").count(), 1, "each prefix once");
        assert!(script.contains("route add 198.51.100.9/32 via 10.0.2.2 dev tap0\n"));
        assert_eq!(route_script(Network::Offline, &host, &deny, &[]), "link set lo up\n");
    }

    #[test]
    fn addresses_and_their_prefixes_are_read_from_ip() {
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 192.0.2.7/24 brd 192.0.2.255 scope global eth0\n\
                       3: dummy0    inet 11.22.33.1/32 scope global dummy0\n";
        let host = parse_addresses(listing);
        assert_eq!(host.addresses, [ip("127.0.0.1"), ip("192.0.2.7"), ip("11.22.33.1")]);
        assert_eq!(host.on_link, [Ipv4Net::parse("127.0.0.0/8").expect("net"), Ipv4Net::parse("192.0.2.0/24").expect("net")]);
        assert_eq!(Ipv4Net::parse("10.1.2.3/8"), Some(Ipv4Net { network: ip("10.0.0.0"), prefix: 8 }));
        for bad in ["10.1.2.3/33", "x/8", "10.1.2/8", ""] {
            assert_eq!(Ipv4Net::parse(bad), None, "{bad:?}");
        }
    }

    /// A stand-in for `ip` that prints `stdout` and exits with `code`.
    fn fake_ip(dir: &Path, name: &str, stdout: &str, code: i32) -> std::path::PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\nprintf '%s' '{stdout}'\necho 'ip: cannot talk to the kernel' >&2\nexit {code}\n"),
        )
        .expect("written");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("executable");
        path
    }

    #[tokio::test]
    async fn host_addresses_fail_closed_when_ip_fails_or_names_none() {
        let dir = std::env::temp_dir().join(format!("flotilla-ip-test-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("dir");
        let listing = "1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 192.0.2.7/24 brd 192.0.2.255 scope global eth0\n";
        let works = fake_ip(&dir, "ip-works", listing, 0);
        let fails = fake_ip(&dir, "ip-fails", listing, 1);
        let silent = fake_ip(&dir, "ip-silent", "", 0);
        let found = host_network(&works, Network::Egress).await.expect("read");
        assert_eq!(found.addresses, [ip("127.0.0.1"), ip("192.0.2.7")]);
        for broken in [fails.clone(), silent, dir.join("no-such-ip")] {
            match host_network(&broken, Network::Egress).await {
                Err(SandboxError::Unavailable(why)) => assert!(why.contains("cannot read this host's addresses"), "{why}"),
                other => panic!("{} must fail closed, got {other:?}", broken.display()),
            }
        }
        let Err(SandboxError::Unavailable(why)) = host_network(&fails, Network::Egress).await else { panic!("fails") };
        assert!(why.contains("cannot talk to the kernel"), "the reason is quoted: {why}");
        assert_eq!(host_network(&fails, Network::Offline).await.expect("offline needs none"), HostNetwork::default());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
