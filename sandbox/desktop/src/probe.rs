//! The check a provider makes before it hands out any sandbox: it builds
//! one jail as a sandbox gets it and runs `true` inside; a host where that
//! fails refuses local sandboxes with the reason, rather than run them
//! with weaker walls.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::jail::{self, JailSettings};
use super::{dns, identity, limits, network, process, LocalConfig};
use flotilla_sandbox::SandboxError;

/// How long building the probe jail may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds a throwaway jail under `root` and runs `true` in it; the reason
/// it failed, in one line.
/// The first existing ancestor of `root` (itself included) that others may
/// not enter (no `x` for others).
fn closed_ancestor(root: &std::path::Path) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    root.ancestors()
        .filter_map(|dir| Some((dir, std::fs::metadata(dir).ok()?)))
        .find(|(_, meta)| meta.is_dir() && meta.permissions().mode() & 0o001 == 0)
        .map(|(dir, _)| dir.to_owned())
}

pub(super) async fn probe_jail(config: &LocalConfig) -> Result<JailSettings, String> {
    config.limits.check()?;
    let tools = Arc::new(jail::HostTools::find(config.network)?);
    let hierarchy = limits::Hierarchy::detect();
    if let limits::Hierarchy::None(why) = &hierarchy {
        tracing::warn!(
            reason = %why,
            "no control group can be made: sandboxes are held to their process and memory limits by resource \
             limits and the reaper's count, and have no CPU limit; give the worker a delegated cgroup or run it as \
             root for all three"
        );
    }
    let user = identity::HostUser::detect()?;
    if matches!(user, identity::HostUser::Root(_)) {
        closed_ancestor(&config.root).map_or(Ok(()), |dir| {
            Err(format!(
                "the sandboxes' directory {} is under {}, which their users cannot enter (a root worker's \
                 sandboxes run as other users): pick a root whose parents others may enter, such as one in /tmp",
                config.root.display(),
                dir.display()
            ))
        })?;
    }
    let settings = JailSettings {
        tools,
        network: config.network,
        exceptions: config.egress_exceptions.clone(),
        deny: config.egress_deny.clone(),
        user,
        hierarchy,
        limits: config.limits,
        dns_upstream: config.dns_upstream.clone().unwrap_or_else(dns::host_resolvers),
    };
    let dir = config.root.join(format!("probe-{:016x}", rand::random::<u64>()));
    let result = run_probe(&dir, &settings).await.map_err(|e| match e {
        SandboxError::Unavailable(reason) => reason,
        other => other.to_string(),
    });
    let _ = std::fs::remove_dir_all(&dir);
    result.map(|()| settings)
}

async fn run_probe(dir: &std::path::Path, settings: &JailSettings) -> Result<(), SandboxError> {
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let slot = identity::Slot::claim(settings.user, |_| true)?;
    jail::prepare_files(dir, &home, settings.network, settings.user.ids(&slot))?;
    let marker = format!("probe-{:016x}", rand::random::<u64>());
    let site = jail::Site { slot: &slot, marker: &marker, dir, home: &home, deadline: Instant::now() + PROBE_TIMEOUT };
    let mut children = Vec::new();
    let mut cgroup = None;
    let result = async {
        let walls = network::build(settings, &site, &mut children, &mut cgroup).await?;
        let (program, args) = walls.wrap(&home, jail::XAccess::None, None, "true", &[]);
        let mut command = process::tied_to_worker(program);
        command.args(args).env_clear().env("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin");
        let output = process::run(command, None, PROBE_TIMEOUT, 64 * 1024).await?;
        if output.exit_code != 0 {
            let stderr = String::from_utf8_lossy(&output.stderr);
            let line = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_owned();
            return Err(SandboxError::Unavailable(format!("bubblewrap failed (exit {}): {line}", output.exit_code)));
        }
        Ok(())
    }
    .await;
    for mut child in children {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    if let Some(cgroup) = cgroup {
        cgroup.remove();
    }
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::closed_ancestor;

    #[test]
    fn a_root_under_a_directory_others_cannot_enter_is_named() {
        let open = std::env::temp_dir().join(format!("flotilla-probe-open-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&open).expect("a dir");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).expect("mode");
        assert_eq!(closed_ancestor(&open.join("sandboxes")), None, "{} is open", open.display());
        let closed = open.join("private");
        std::fs::create_dir(&closed).expect("a dir");
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).expect("mode");
        assert_eq!(closed_ancestor(&closed.join("a/b")), Some(closed.clone()));
        let _ = std::fs::remove_dir_all(&open);
    }
}
