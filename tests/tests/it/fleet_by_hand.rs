//! The README's fleet by hand starts: its shell block, as written (all but
//! the `cargo build` line, which the test command has done), runs in a
//! network namespace of its own, so its fixed loopback ports (Redis 6379,
//! the API 8080, the store 9000, the sandbox host 49982/49983) are free and
//! nothing else is reached; its last command submits a task that types on
//! a desktop, which the workers' `local` provider takes from the sandbox
//! host (`FLOTILLA_SANDBOXD_URL`), and follows it to its end, and must
//! succeed; the host's `/metrics` then counts the desktops it made.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_tests::fleet::binary;

/// How long the whole block may take.
const LIMIT: Duration = Duration::from_secs(180);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The shell block under the README's "A fleet by hand".
fn fleet_by_hand_block(readme: &str) -> String {
    let section = readme.split("### A fleet by hand").nth(1).expect("the README has a fleet by hand");
    let block = section.split("```sh\n").nth(1).expect("its shell block");
    block.split("\n```").next().expect("the block ends").to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_readmes_fleet_by_hand_starts_and_runs_a_task() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let block = fleet_by_hand_block(&readme);
    assert!(block.starts_with("cargo build"), "the block opens with the build:\n{block}");
    let built = binary("flotilla-api").parent().expect("the binaries' directory").display().to_string();
    let commands: Vec<String> =
        block.lines().filter(|line| !line.starts_with("cargo build")).map(|line| line.replace("target/debug", &built)).collect();
    let dir = std::env::temp_dir().join(format!("flotilla-fleet-by-hand-{:016x}", rand::random::<u64>()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let script = format!(
        "set -m\nip link set lo up\ncd {root}\n{commands}\nstatus=$?\ncurl -fs \"$FLOTILLA_SANDBOXD_URL/metrics\" > {metrics}\n\
         kill $(jobs -p) 2>/dev/null\nwait\nexit $status\n",
        root = repo_root().display(),
        metrics = dir.join("metrics.txt").display(),
        commands = commands.join("\n"),
    );
    let run = tokio::process::Command::new("unshare")
        .args(["--net", "--fork", "bash", "-c", &script])
        .current_dir(&dir)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(LIMIT, run).await.expect("the fleet by hand ends its task").expect("unshare runs");
    let _ = std::fs::remove_dir_all("/tmp/flotilla-fleet");
    let metrics = std::fs::read_to_string(dir.join("metrics.txt")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "the fleet by hand failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("succeeded") || stderr.contains("succeeded"), "the task succeeded:\n{stdout}\n{stderr}");
    let created = metrics
        .lines()
        .find_map(|line| line.strip_prefix("flotilla_sandboxd_creates_total "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("the sandbox host's metrics count creates:\n{metrics}"));
    assert!(created >= 1.0, "the workers' desktops came from the sandbox host:\n{metrics}");
}
