//! Names a sandbox may resolve. A sandbox's `/etc/resolv.conf` names
//! `127.0.0.1`, where two forwarders in its network namespace (`socat` on
//! UDP and TCP port 53, run as the sandbox's root outside its file view and
//! pid namespace) carry each query to the worker over Unix sockets in the
//! sandbox's run directory. The worker asks this host's resolvers and
//! answers `REFUSED` when an answer names an address the sandbox may not
//! reach (a non-public range, this host's own addresses and links, the
//! operator's deny list), so internal names do not resolve and a name cannot
//! be pointed at the fleet. slirp4netns's own DNS is off: there is no other
//! resolver in reach.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flotilla_types::address::{in_prefix, kind_of};
use hickory_proto::op::{Message, ResponseCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinHandle;

use super::egress::Ipv4Net;
use flotilla_sandbox::SandboxError;

/// The socket UDP queries arrive on, one query a connection, as sent.
pub(crate) const UDP_SOCKET: &str = "dns-udp.sock";
/// The socket TCP queries arrive on, length-prefixed, several a connection.
pub(crate) const TCP_SOCKET: &str = "dns-tcp.sock";
/// How long an upstream resolver has to answer.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest message read from either side.
const MAX_MESSAGE: usize = 65535;
/// The port DNS is served on (inside the sandbox) and asked on (upstream).
pub(crate) const DNS_PORT: u16 = 53;

/// Which answers a sandbox may have, and whom to ask.
#[derive(Debug, Clone)]
pub(crate) struct DnsPolicy {
    pub upstream: Vec<SocketAddr>,
    /// Prefixes beside the non-public ones: this host's addresses and
    /// links, the operator's deny list.
    pub blocked: Vec<Ipv4Net>,
}

impl DnsPolicy {
    /// Whether the sandbox may be told `ip`.
    fn allows(&self, ip: IpAddr) -> bool {
        if kind_of(ip).is_some() {
            return false;
        }
        match ip {
            IpAddr::V4(v4) => !self.blocked.iter().any(|net| in_prefix(v4, net.network, net.prefix)),
            IpAddr::V6(_) => true,
        }
    }
}

/// This host's resolvers, from `/etc/resolv.conf`'s `nameserver` lines.
pub(crate) fn host_resolvers() -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, DNS_PORT))
        .collect()
}

/// A sandbox's resolver on the worker's side; stops when dropped.
pub(crate) struct DnsServer {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for DnsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Serves `policy` on the two sockets in `run_dir`.
pub(crate) fn serve(run_dir: &Path, policy: Arc<DnsPolicy>) -> Result<DnsServer, SandboxError> {
    let mut tasks = Vec::new();
    for (name, framed) in [(UDP_SOCKET, false), (TCP_SOCKET, true)] {
        let listener = bind(&run_dir.join(name))?;
        let policy = Arc::clone(&policy);
        tasks.push(tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer_connection(stream, Arc::clone(&policy), framed));
            }
        }));
    }
    Ok(DnsServer { tasks })
}

/// A listener whose socket the sandbox's root (another uid) may connect to;
/// the directory is the one sandbox's own.
fn bind(path: &PathBuf) -> Result<UnixListener, SandboxError> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o666))?;
    Ok(listener)
}

/// Answers the queries of one connection: one unframed (a UDP datagram as
/// the forwarder got it), or length-prefixed ones until the peer closes.
async fn answer_connection(mut stream: UnixStream, policy: Arc<DnsPolicy>, framed: bool) {
    let mut buf = vec![0u8; MAX_MESSAGE];
    if !framed {
        let Ok(Ok(n @ 1..)) = tokio::time::timeout(UPSTREAM_TIMEOUT, stream.read(&mut buf)).await else { return };
        if let Some(reply) = resolve(&policy, &buf[..n], false).await {
            let _ = stream.write_all(&reply).await;
        }
        return;
    }
    loop {
        let Ok(len) = stream.read_u16().await else { return };
        let query = &mut buf[..usize::from(len)];
        if stream.read_exact(query).await.is_err() {
            return;
        }
        let Some(reply) = resolve(&policy, query, true).await else { return };
        let Ok(len) = u16::try_from(reply.len()) else { return };
        if stream.write_u16(len).await.is_err() || stream.write_all(&reply).await.is_err() {
            return;
        }
    }
}

/// The answer to `query`: the upstream's, unless it names an address the
/// policy refuses; `None` for what is not a DNS query.
async fn resolve(policy: &DnsPolicy, query: &[u8], tcp: bool) -> Option<Vec<u8>> {
    let parsed = Message::from_vec(query).ok()?;
    let refused = |code: ResponseCode| {
        let mut answer = Message::error_msg(parsed.metadata.id, parsed.metadata.op_code, code);
        answer.queries = parsed.queries.clone();
        answer.metadata.recursion_desired = parsed.metadata.recursion_desired;
        answer.metadata.recursion_available = true;
        answer.to_vec().ok()
    };
    let Some(reply) = ask_upstream(&policy.upstream, query, tcp).await else {
        return refused(ResponseCode::ServFail);
    };
    let Ok(answer) = Message::from_vec(&reply) else { return refused(ResponseCode::ServFail) };
    if answer.metadata.id != parsed.metadata.id {
        return refused(ResponseCode::ServFail);
    }
    let records = answer.answers.iter().chain(&answer.additionals);
    if records.filter_map(|record| record.data.ip_addr()).any(|ip| !policy.allows(ip)) {
        return refused(ResponseCode::Refused);
    }
    Some(reply)
}

/// The first answer of the upstream resolvers, tried in order.
async fn ask_upstream(upstream: &[SocketAddr], query: &[u8], tcp: bool) -> Option<Vec<u8>> {
    for server in upstream {
        let asked = if tcp { ask_tcp(*server, query).await } else { ask_udp(*server, query).await };
        if let Ok(Ok(reply)) = asked {
            return Some(reply);
        }
    }
    None
}

async fn ask_udp(server: SocketAddr, query: &[u8]) -> Result<std::io::Result<Vec<u8>>, tokio::time::error::Elapsed> {
    tokio::time::timeout(UPSTREAM_TIMEOUT, async {
        let local: SocketAddr = if server.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0u16; 8], 0).into() };
        let socket = tokio::net::UdpSocket::bind(local).await?;
        socket.connect(server).await?;
        socket.send(query).await?;
        let mut buf = vec![0u8; MAX_MESSAGE];
        let n = socket.recv(&mut buf).await?;
        buf.truncate(n);
        Ok(buf)
    })
    .await
}

async fn ask_tcp(server: SocketAddr, query: &[u8]) -> Result<std::io::Result<Vec<u8>>, tokio::time::error::Elapsed> {
    tokio::time::timeout(UPSTREAM_TIMEOUT, async {
        let mut stream = tokio::net::TcpStream::connect(server).await?;
        let len = u16::try_from(query.len()).map_err(std::io::Error::other)?;
        stream.write_u16(len).await?;
        stream.write_all(query).await?;
        let len = stream.read_u16().await?;
        let mut buf = vec![0u8; usize::from(len)];
        stream.read_exact(&mut buf).await?;
        Ok(buf)
    })
    .await
}

/// The `socat` arguments of the sandbox's two forwarders: UDP and TCP port
/// 53 on its loopback to the worker's sockets in `run_dir`.
pub(crate) fn forwarders(run_dir: &Path) -> [Vec<String>; 2] {
    let target = |name: &str| format!("UNIX-CONNECT:{}", run_dir.join(name).display());
    [
        vec![format!("UDP4-RECVFROM:{DNS_PORT},bind=127.0.0.1,fork"), target(UDP_SOCKET)],
        vec![format!("TCP4-LISTEN:{DNS_PORT},bind=127.0.0.1,fork,reuseaddr"), target(TCP_SOCKET)],
    ]
}

#[cfg(test)]
pub(crate) mod stand_in {
    //! A resolver for tests: answers A queries from a table, on UDP and TCP
    //! on one loopback port.

    use std::collections::HashMap;
    use std::net::{Ipv4Addr, SocketAddr};

    use hickory_proto::op::{Message, ResponseCode};
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Serves `names` (lower-case, without the trailing dot) until the test ends.
    pub async fn serve(names: HashMap<String, Ipv4Addr>) -> SocketAddr {
        let udp = tokio::net::UdpSocket::bind("127.0.0.1:0").await.expect("binds");
        let addr = udp.local_addr().expect("addr");
        let tcp = tokio::net::TcpListener::bind(addr).await.expect("binds the same port on TCP");
        let (for_udp, for_tcp) = (names.clone(), names);
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = udp.recv_from(&mut buf).await {
                if let Some(reply) = answer(&for_udp, &buf[..n]) {
                    let _ = udp.send_to(&reply, from).await;
                }
            }
        });
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = tcp.accept().await {
                let names = for_tcp.clone();
                tokio::spawn(async move {
                    while let Ok(len) = stream.read_u16().await {
                        let mut query = vec![0u8; usize::from(len)];
                        if stream.read_exact(&mut query).await.is_err() {
                            return;
                        }
                        let Some(reply) = answer(&names, &query) else { return };
                        let _ = stream.write_u16(reply.len() as u16).await;
                        let _ = stream.write_all(&reply).await;
                    }
                });
            }
        });
        addr
    }

    fn answer(names: &HashMap<String, Ipv4Addr>, query: &[u8]) -> Option<Vec<u8>> {
        let query = Message::from_vec(query).ok()?;
        let mut reply = Message::response(query.metadata.id, query.metadata.op_code);
        reply.metadata.recursion_desired = query.metadata.recursion_desired;
        reply.metadata.recursion_available = true;
        reply.queries = query.queries.clone();
        for asked in &query.queries {
            let name = asked.name().to_ascii().trim_end_matches('.').to_ascii_lowercase();
            if let (Some(ip), hickory_proto::rr::RecordType::A) = (names.get(&name), asked.query_type()) {
                reply.answers.push(Record::from_rdata(asked.name().clone(), 60, RData::A(A(*ip))));
            }
        }
        if reply.answers.is_empty()
            && !query.queries.iter().any(|q| names.contains_key(&q.name().to_ascii().trim_end_matches('.').to_ascii_lowercase()))
        {
            reply.metadata.response_code = ResponseCode::NXDomain;
        }
        reply.to_vec().ok()
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    #[test]
    fn only_public_addresses_outside_the_blocked_prefixes_are_told() {
        let policy = DnsPolicy { upstream: Vec::new(), blocked: vec![Ipv4Net::parse("11.22.33.0/24").expect("net")] };
        assert!(policy.allows(IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34))));
        for refused in ["10.0.0.5", "127.0.0.1", "169.254.169.254", "198.51.100.1", "11.22.33.44", "::1", "fd00::1"] {
            assert!(!policy.allows(refused.parse().expect("ip")), "{refused}");
        }
    }

    #[test]
    fn forwarders_listen_on_the_sandboxes_loopback_only() {
        let [udp, tcp] = forwarders(Path::new("/s/run"));
        assert_eq!(udp, ["UDP4-RECVFROM:53,bind=127.0.0.1,fork", "UNIX-CONNECT:/s/run/dns-udp.sock"]);
        assert!(tcp[0].starts_with("TCP4-LISTEN:53,bind=127.0.0.1") && tcp[1].ends_with("dns-tcp.sock"));
    }
}
