//! The jail seen from inside, as an agent sees it: commands typed into a
//! sandbox's own terminal try to reach the fleet's ports, private and
//! link-local addresses, other sandboxes' displays and homes, the worker's
//! files and the host's `/etc`, and all of it fails; only the stand-in for
//! the internet answers, and only while egress is on. These run as whatever
//! user runs the tests (root on CI).

use std::path::PathBuf;

use super::jail_fixture::{effective_uid, run_as_unprivileged, Fixture};
use super::Network;
use flotilla_sandbox::jail_suite;
use flotilla_sandbox::suite::host_address;
use flotilla_sandbox::{suite, SandboxProvider};

async fn reachability(network: Network) {
    let host = host_address();
    let fixture = Fixture::new(network, vec![host]);
    jail_suite::reachability(fixture.provider(), host, network == Network::Egress).await;
}

#[tokio::test]
async fn sandbox_reaches_the_internet_through_egress_and_nothing_of_the_host() {
    reachability(Network::Egress).await;
}

#[tokio::test]
async fn sandbox_offline_reaches_nothing() {
    reachability(Network::Offline).await;
}

#[tokio::test]
async fn sandbox_cannot_see_or_drive_another_display() {
    cannot_see_or_drive_another_display().await;
}

async fn cannot_see_or_drive_another_display() {
    let fixture = Fixture::new(Network::Egress, Vec::new());
    let provider = fixture.provider();
    let (a, b) = tokio::join!(suite::create(provider, (800, 600)), suite::create(provider, (800, 600)));
    let (mine, theirs) = (provider.display_access(&a.id).await.expect("a"), provider.display_access(&b.id).await.expect("b"));
    assert_eq!(jail_suite::display_of(provider, &a).await, mine.display, "the sandbox's programs get its own display");
    jail_suite::cannot_see_or_drive_another_display(provider, &a, theirs.display).await;

    // On the host, the display wants its cookie: without it a client is
    // refused, with the provider's cookie file (as the worker's tools use
    // it) it gets in.
    let xwd = |auth: PathBuf| {
        std::process::Command::new("xwd")
            .args(["-display", &format!(":{}", theirs.display), "-root", "-silent"])
            .env("XAUTHORITY", auth)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .expect("xwd runs")
            .success()
    };
    assert!(!xwd(PathBuf::from("/dev/null")), "b's display admits a client without its cookie");
    assert!(xwd(theirs.xauthority.clone()), "the worker attaches with the cookie file");
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
}

#[tokio::test]
async fn sandbox_as_root_cannot_mount_write_the_host_or_read_secrets() {
    assert_eq!(effective_uid(), 0, "this test shows the jail of a worker that runs as root; run the suite as root");
    cannot_mount_write_the_host_or_read_secrets().await;
}

/// See [`jail_suite::cannot_mount_write_the_host_or_read_secrets`].
async fn cannot_mount_write_the_host_or_read_secrets() {
    let fixture = Fixture::new(Network::Egress, Vec::new());
    jail_suite::cannot_mount_write_the_host_or_read_secrets(fixture.provider(), &fixture.root).await;
}

/// Runs the reachability, display and host-file checks in a copy of this
/// test binary started as `nobody`, as a worker that is not root runs: the
/// jail is then built from an unprivileged user's namespaces and must hold
/// just the same.
#[tokio::test]
async fn sandbox_jail_holds_when_the_worker_is_not_root() {
    if effective_uid() != 0 {
        // Already unprivileged (a developer's machine): check here.
        unprivileged_checks().await;
        return;
    }
    run_as_unprivileged(&format!("{}::as_unprivileged_user", module_path!())).await;
}

/// The checks of this module, as whatever unprivileged user runs it; run by
/// `sandbox_jail_holds_when_the_worker_is_not_root`.
#[tokio::test]
#[ignore = "run as an unprivileged user by sandbox_jail_holds_when_the_worker_is_not_root"]
async fn as_unprivileged_user() {
    unprivileged_checks().await;
}

async fn unprivileged_checks() {
    assert_ne!(effective_uid(), 0, "runs as an unprivileged user");
    reachability(Network::Egress).await;
    reachability(Network::Offline).await;
    cannot_see_or_drive_another_display().await;
    cannot_mount_write_the_host_or_read_secrets().await;
    super::escape_tests::cannot_write_proc_sys_read_private_keys_or_be_host_root().await;
    super::escape_tests::x_server_is_inside_and_cannot_attach_host_memory().await;
}
