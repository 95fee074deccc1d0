//! The jail holds through the sandbox host: the checks the local desktop's
//! own tests make from inside a sandbox (`flotilla_sandbox::jail_suite`:
//! the fleet's ports, private and link-local ranges, other displays and
//! homes, the host's files, mounts, `/proc/sys`, private keys) run against
//! desktops of a `flotilla-sandboxd`, driven as a worker's `local` provider
//! drives them (E2B's protocol, scripts typed into the sandbox's terminal).

use flotilla_sandbox::jail_suite;
use flotilla_sandbox::suite::{self, host_address};
use flotilla_sandboxd::Sandboxd;
use flotilla_tests::desktop::local_provider_on;

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_a_sandbox_reaches_the_internet_and_nothing_of_the_host() {
    let internet = host_address();
    let host = Sandboxd::start_with_internet(vec![internet]).await;
    jail_suite::reachability(&*local_provider_on(&host), internet, true).await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_a_sandbox_cannot_mount_write_the_host_or_read_secrets() {
    let host = Sandboxd::start().await;
    jail_suite::cannot_mount_write_the_host_or_read_secrets(&*local_provider_on(&host), host.root()).await;
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_a_sandbox_cannot_see_or_drive_another_display() {
    let host = Sandboxd::start().await;
    let provider = local_provider_on(&host);
    let (a, b) = tokio::join!(suite::create(&*provider, (800, 600)), suite::create(&*provider, (800, 600)));
    let theirs = jail_suite::display_of(&*provider, &b).await;
    jail_suite::cannot_see_or_drive_another_display(&*provider, &a, theirs).await;
    provider.kill(&a.id).await.expect("kill a");
    provider.kill(&b.id).await.expect("kill b");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxd_a_sandbox_cannot_write_proc_sys_or_read_private_keys() {
    let host = Sandboxd::start().await;
    let provider = local_provider_on(&host);
    let sandbox = suite::create(&*provider, (800, 600)).await;
    jail_suite::cannot_write_proc_sys_or_read_private_keys(&*provider, &sandbox, host.root()).await;
    provider.kill(&sandbox.id).await.expect("kill");
    host.shutdown().await;
}
