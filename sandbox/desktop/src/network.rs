//! The network of one sandbox's held namespaces: slirp4netns (with
//! egress), the routes of [`egress`](super::egress), and the sandbox's
//! [resolver](super::dns) with its two forwarders; and [`build`], which
//! makes a whole jail at once (the probe's).

use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};

use super::dns::{self, DnsPolicy, DnsServer};
use super::egress::{self, host_path, HostNetwork, Ipv4Net, Network};
use super::jail::{enter, hold, spawn_setup, Jail, JailSettings, Site, SETUP_TIMEOUT};
use super::limits::{Cgroup, Confinement};
use super::process;
use flotilla_sandbox::SandboxError;

/// Builds the walls of the sandbox at `site` at once: [`hold`], then
/// [`connect`]. Every process started joins `children`, also when a later
/// step fails; so does the group (`cgroup`) once made.
pub(crate) async fn build(
    settings: &JailSettings,
    site: &Site<'_>,
    children: &mut Vec<Child>,
    cgroup: &mut Option<Cgroup>,
) -> Result<Jail, SandboxError> {
    let jail = hold(settings, site, children, cgroup).await?;
    // The probe's resolver ends with it.
    drop(connect(settings, site, &jail, children).await?);
    Ok(jail)
}

/// Gives the held namespaces their network: with egress slirp4netns, then
/// the routes (the host's addresses are read meanwhile) and the sandbox's
/// [resolver](dns), whose worker side is returned; offline, the loopback
/// alone. A sandbox is handed out only after this, so nothing it runs sees
/// its network before the routes.
pub(crate) async fn connect(
    settings: &JailSettings,
    site: &Site<'_>,
    jail: &Jail,
    children: &mut Vec<Child>,
) -> Result<Option<DnsServer>, SandboxError> {
    let slirp = async {
        if settings.network == Network::Egress {
            children.push(start_egress(settings, &jail.confinement, site, jail.holder).await?);
        }
        Ok::<_, SandboxError>(())
    };
    let (host, slirp) = tokio::join!(egress::host_network(&settings.tools.ip, settings.network), slirp);
    slirp?;
    let host = host?;
    apply_routes(settings, site, jail.holder, &host).await?;
    if settings.network == Network::Offline {
        return Ok(None);
    }
    let mut blocked: Vec<Ipv4Net> = host.on_link.clone();
    blocked.extend(host.addresses.iter().map(|a| Ipv4Net { network: *a, prefix: 32 }));
    blocked.extend(&settings.deny);
    let policy = DnsPolicy { upstream: settings.dns_upstream.clone(), blocked };
    let server = dns::serve(&site.dir.join("run"), std::sync::Arc::new(policy))?;
    for forwarder in dns::forwarders(&site.dir.join("run")) {
        children.push(start_dns_forwarder(settings, site, jail, &forwarder).await?);
    }
    Ok(Some(server))
}

/// Starts one of the sandbox's resolver forwarders in its network namespace
/// as its root, and waits until it listens.
async fn start_dns_forwarder(
    settings: &JailSettings,
    site: &Site<'_>,
    jail: &Jail,
    args: &[String],
) -> Result<Child, SandboxError> {
    let (entry, mut argv) = enter(settings.user, jail.ids, &settings.tools.nsenter, jail.holder, false);
    argv.push(format!("--net=/proc/{}/ns/net", jail.holder));
    argv.extend(["--".to_owned(), "socat".to_owned()]);
    argv.extend(args.iter().cloned());
    let mut command = process::tied_to_worker("sh");
    command.args(jail.confinement.wrap(&entry, &argv));
    let mut child = spawn_setup(command, site.marker, Some(jail.holder), "socat (the sandbox's resolver)")?;
    let pid = child.id().unwrap_or_default();
    let udp = args[0].starts_with("UDP");
    loop {
        if listens_on_dns(pid, udp) {
            return Ok(child);
        }
        if Instant::now() >= site.deadline || child.try_wait().ok().flatten().is_some() {
            let _ = child.start_kill();
            return Err(SandboxError::Unavailable("the sandbox's resolver (socat) did not start".into()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Whether a socket on the loopback's DNS port is bound in the network
/// namespace of `pid` (`/proc/PID/net/{udp,tcp}`: `0100007F:0035`).
fn listens_on_dns(pid: u32, udp: bool) -> bool {
    // Until it runs socat, the process is in the host's namespace.
    if !std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "socat") {
        return false;
    }
    let table = std::fs::read_to_string(format!("/proc/{pid}/net/{}", if udp { "udp" } else { "tcp" })).unwrap_or_default();
    let local = format!("0100007F:{:04X}", dns::DNS_PORT);
    table.lines().skip(1).any(|line| line.split_whitespace().nth(1) == Some(local.as_str()))
}

/// Brings up the loopback and, with egress, the routes of
/// [`egress::route_script`].
async fn apply_routes(settings: &JailSettings, site: &Site<'_>, holder: u32, host: &HostNetwork) -> Result<(), SandboxError> {
    let script = egress::route_script(settings.network, host, &settings.deny, &settings.exceptions);
    let (entry, args) = enter(settings.user, settings.user.ids(site.slot), &settings.tools.nsenter, holder, false);
    let mut command = Command::new(entry);
    command.args(args).arg(format!("--net=/proc/{holder}/ns/net"));
    command.arg("--").arg(&settings.tools.ip).args(["-batch", "-"]);
    command.env_clear().env("PATH", host_path());
    let output = process::run(command, Some(script.as_bytes()), SETUP_TIMEOUT, process::MAX_OUTPUT).await?;
    if output.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(SandboxError::Unavailable(format!(
            "cannot set the sandbox's routes: {}",
            stderr.lines().next().unwrap_or("ip failed")
        )));
    }
    Ok(())
}

/// Starts slirp4netns for the holder's namespace, as the sandbox's root,
/// and waits until it has configured the interface.
async fn start_egress(
    settings: &JailSettings,
    confinement: &Confinement,
    site: &Site<'_>,
    holder: u32,
) -> Result<Child, SandboxError> {
    let (marker, deadline) = (site.marker, site.deadline);
    let tools = &settings.tools;
    let slirp = tools.slirp4netns.as_ref().ok_or_else(|| SandboxError::Unavailable("slirp4netns was not looked for".into()))?;
    // slirp4netns runs inside the holder's user namespace as its root,
    // without any privilege on the host, as rootless containers start it;
    // its sockets stay in the host's network namespace. The sandbox's
    // network namespace reaches it as a descriptor opened before the ids
    // change, since the sandbox's uid may not open the holder's /proc.
    let mut inner = vec![r#"ns=$1; shift; exec "$@" 3<"$ns""#.to_owned(), "slirp".into(), format!("/proc/{holder}/ns/net")];
    let (entry, args) = enter(settings.user, settings.user.ids(site.slot), &tools.nsenter, holder, false);
    inner.push(entry);
    inner.extend(args);
    inner.push("--".into());
    inner.push(slirp.display().to_string());
    inner.extend(
        ["--configure", "--disable-host-loopback", "--disable-dns", "--mtu", "65520", "--enable-sandbox", "--enable-seccomp"]
            .map(String::from),
    );
    inner.extend(["--ready-fd", "1", "--netns-type", "path", "/proc/self/fd/3", "tap0"].map(String::from));
    let mut wrapped = vec!["-c".to_owned()];
    wrapped.extend(inner);
    let mut command = process::tied_to_worker("sh");
    command.args(confinement.wrap("sh", &wrapped));
    // That is: sh -c JOIN … prlimit … -- sh -c OPEN-NS … nsenter … slirp4netns.
    let mut slirp = spawn_setup(command, marker, Some(holder), "slirp4netns")?;
    let mut stdout = slirp.stdout.take();
    // It writes "1" on its ready fd, after warnings (on the same stdout).
    let ready = tokio::time::timeout_at(deadline.into(), async {
        let Some(out) = stdout.as_mut() else { return false };
        let mut seen = Vec::new();
        let mut chunk = [0u8; 256];
        while let Ok(n @ 1..) = out.read(&mut chunk).await {
            seen.extend_from_slice(&chunk[..n]);
            if seen.rsplit(|b| *b == b'\n').next() == Some(b"1") {
                return true;
            }
        }
        false
    })
    .await;
    if ready != Ok(true) {
        let _ = slirp.start_kill();
        return Err(SandboxError::Unavailable("slirp4netns did not configure the sandbox's network".into()));
    }
    // Keep reading so slirp4netns never blocks on a full pipe.
    if let Some(mut out) = stdout {
        tokio::spawn(async move {
            let mut sink = [0u8; 256];
            while matches!(out.read(&mut sink).await, Ok(1..)) {}
        });
    }
    Ok(slirp)
}
