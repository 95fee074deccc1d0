//! `scripts/demo.sh --keep` as a newcomer uses it: the script runs the demo
//! batch on real local desktops and leaves the fleet up; the dashboard address
//! it prints opens in a headless Chromium and, signed in with the printed key,
//! shows the demo's tasks with their screenshots (a PNG of the page is kept
//! under `<target>/test-artifacts/`); the printed `flotilla` command, run as
//! printed in a fresh shell, submits one more task that succeeds; the printed
//! screenshot links answer 200; and `--stop` leaves none of the fleet's
//! processes (nor their children, such as the desktops) running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use flotilla_tests::browser::Browser;
use serde_json::json;

/// How long the page may take to show what the API already knows.
const SHOWN: Duration = Duration::from_secs(20);
/// Tasks in the demo's batch: enough for desktops and a desktop-free task.
const DEMO_TASKS: &str = "4";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace root").to_path_buf()
}

fn artifact_path() -> PathBuf {
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let target = tmp.parent().map_or_else(|| tmp.clone(), PathBuf::from);
    target.join("test-artifacts").join("demo-dashboard.png")
}

/// Stops the kept fleet however the test ends.
struct KeptFleet {
    dir: PathBuf,
}

impl KeptFleet {
    fn stop(&self) -> std::process::Output {
        Command::new("bash")
            .arg(repo_root().join("scripts/demo.sh"))
            .arg("--stop")
            .env("FLOTILLA_DEMO_DIR", &self.dir)
            .output()
            .expect("run demo.sh --stop")
    }
}

impl Drop for KeptFleet {
    fn drop(&mut self) {
        self.stop();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// The value printed after `label` on one of the script's lines.
fn printed<'a>(output: &'a str, label: &str) -> &'a str {
    let line = output.lines().find(|l| l.trim_start().starts_with(label)).unwrap_or_else(|| panic!("no {label} in {output}"));
    line.trim_start()[label.len()..].split_whitespace().next().unwrap_or_else(|| panic!("nothing after {label}"))
}

/// The process's parent, from `/proc/<pid>/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 2..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// Whether the process runs (a zombie waiting for its parent does not).
fn running(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
    !matches!(state, None | Some('Z' | 'X'))
}

/// `roots` and every process below them.
fn with_descendants(roots: &[u32]) -> Vec<u32> {
    let all: Vec<u32> =
        std::fs::read_dir("/proc").expect("/proc").filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect();
    let mut found = roots.to_vec();
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        let children: Vec<u32> = all.iter().copied().filter(|&p| parent_of(p) == Some(parent) && !found.contains(&p)).collect();
        found.extend(children);
        i += 1;
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_demo_keep_leaves_a_usable_fleet_and_stop_ends_every_process() {
    let dir = std::env::temp_dir().join(format!("flotilla-demo-test-{}", ulid::Ulid::new()));
    std::fs::create_dir_all(&dir).expect("demo dir");
    let fleet = KeptFleet { dir: dir.clone() };
    let run = Command::new("bash")
        .arg(repo_root().join("scripts/demo.sh"))
        .arg("--keep")
        .env("FLOTILLA_DEMO_DIR", &dir)
        .env("FLOTILLA_DEMO_TASKS", DEMO_TASKS)
        // The suite's binaries, built before it ran: a cargo build from
        // inside the suite would relink them under tests running them.
        .env("FLOTILLA_DEMO_BIN_DIR", flotilla_tests::fleet::binary("flotilla-api").parent().expect("bin dir"))
        .output()
        .expect("run demo.sh --keep");
    let out = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "demo.sh --keep failed:\n{out}");

    let dashboard = printed(&out, "dashboard:").to_owned();
    let key = printed(&out, "API key:").to_owned();
    let cli_line = out
        .lines()
        .skip_while(|l| !l.contains("the CLI, from any shell:"))
        .nth(1)
        .unwrap_or_else(|| panic!("no CLI command printed:\n{out}"))
        .trim()
        .to_owned();
    let links: Vec<String> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("seq "))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    assert!(!links.is_empty(), "no screenshot links printed:\n{out}");
    let recorded: Vec<u32> = std::fs::read_to_string(dir.join("pids"))
        .expect("the recorded PIDs")
        .lines()
        .map(|l| l.trim().parse().expect("a PID"))
        .collect();
    assert!(recorded.iter().all(|&p| running(p)), "the fleet stays up after the script: {recorded:?}");

    // The browser task filled the shop's form: its check passed and the
    // receipt it downloaded is a stored file of the task.
    let shop = out.lines().find(|l| l.starts_with("the shop task ")).unwrap_or_else(|| panic!("no shop task:\n{out}"));
    assert!(shop.contains("ended succeeded, its check: passed"), "{shop}");
    let receipt = out
        .lines()
        .find(|l| l.trim_start().starts_with("file Downloads/receipt.txt"))
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no receipt link printed:\n{out}"));
    let body = reqwest::get(receipt).await.expect("GET the receipt").text().await.expect("receipt text");
    assert_eq!(body, "order for Ada: 3\n");

    // The printed links answer while the fleet runs.
    let http = reqwest::Client::new();
    for link in &links {
        let status = http.get(link).send().await.expect("GET a screenshot link").status();
        assert_eq!(status.as_u16(), 200, "{link}");
    }

    // The dashboard, signed in with the printed key, shows the demo's tasks
    // and a task's screenshots.
    let mut browser = Browser::launch(1280, 800).await.expect("start chromium");
    browser.navigate(&dashboard).await.expect("open the dashboard");
    browser.type_into("#key-input", &key).await.expect("type the key");
    browser.click("#key-submit").await.expect("sign in");
    browser.wait_for("the board shows", "!document.getElementById('board').hidden", SHOWN).await.expect("signed in");
    let all_done = format!(
        "Array.from(document.querySelectorAll('#tasks tr[data-task-id]')).filter(r => r.textContent.includes('succeeded')).length >= {DEMO_TASKS}"
    );
    browser.wait_for("the demo's tasks show as succeeded", &all_done, SHOWN).await.expect("tasks shown");
    // The wall shows the desktop the demo keeps running, live: its tile's
    // noVNC page draws the desktop on its canvas.
    let watched = out
        .lines()
        .skip_while(|l| !l.contains("watch a desktop live"))
        .nth(1)
        .and_then(|l| l.split_whitespace().last())
        .unwrap_or_else(|| panic!("no watched task printed:\n{out}"))
        .to_owned();
    let tile_live = format!(
        "(f => !!f && !!f.contentDocument && Array.from(f.contentDocument.querySelectorAll('canvas')).some(c => c.width > 0))\
         (document.querySelector('#wall figure[data-task-id=\"{watched}\"] iframe'))"
    );
    browser.wait_for("the wall shows the running desktop live", &tile_live, SHOWN).await.expect("live wall");
    // The task whose screenshot links the demo printed (a few of its
    // tasks only wait and have none).
    let id = out
        .lines()
        .find_map(|l| l.split("screenshots of ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no task named with its screenshots:\n{out}"))
        .to_owned();
    browser.click(&format!("#tasks tr[data-task-id=\"{id}\"]")).await.expect("open the first task");
    let shown = "(img => img.complete && img.naturalWidth > 0)(document.getElementById('shot-image')) && \
                 document.querySelectorAll('#shots img').length > 0";
    browser.wait_for("the task's screenshots render", shown, SHOWN).await.expect("screenshots shown");
    let png = browser.screenshot_png().await.expect("screenshot of the page");
    let path = artifact_path();
    std::fs::create_dir_all(path.parent().expect("artifact dir")).expect("create the artifact dir");
    std::fs::write(&path, &png).expect("write the screenshot");
    println!("demo dashboard screenshot: {}", path.display());
    browser.close().await;

    // The printed live-view command, for the task kept running, answers a
    // view URL in a fresh shell (the workers' HTTP side is on by default).
    let view_line = out
        .lines()
        .skip_while(|l| !l.contains("watch a desktop live"))
        .nth(1)
        .unwrap_or_else(|| panic!("no view command printed:\n{out}"))
        .trim()
        .to_owned();
    let viewed = Command::new("env")
        .args(["-i", "PATH=/usr/local/bin:/usr/bin:/bin", "bash", "-c", &view_line])
        .output()
        .expect("run the printed view command");
    let said = format!("{}{}", String::from_utf8_lossy(&viewed.stdout), String::from_utf8_lossy(&viewed.stderr));
    assert!(viewed.status.success() && said.contains("/novnc/"), "{view_line}\n{said}");

    // The printed command works in a fresh shell that inherits nothing.
    let submitted = Command::new("env")
        .args(["-i", "PATH=/usr/local/bin:/usr/bin:/bin", "bash", "-c", &cli_line])
        .output()
        .expect("run the printed command");
    let said = format!("{}{}", String::from_utf8_lossy(&submitted.stdout), String::from_utf8_lossy(&submitted.stderr));
    assert!(submitted.status.success(), "{cli_line}\n{said}");
    assert!(said.contains("succeeded"), "{said}");
    let tasks = http
        .get(format!("{}v1/tasks?limit=50", dashboard))
        .bearer_auth(&key)
        .send()
        .await
        .expect("list tasks")
        .json::<serde_json::Value>()
        .await
        .expect("tasks JSON");
    let count = tasks["tasks"].as_array().map_or(0, Vec::len);
    // The batch (its tasks and the shop's), the desktop kept running to
    // watch, and the one submitted above.
    assert_eq!(json!(count), json!(DEMO_TASKS.parse::<usize>().expect("count") + 3), "{tasks}");

    // --stop leaves nothing of the fleet running.
    let everything = with_descendants(&recorded);
    let stopped = fleet.stop();
    assert!(stopped.status.success(), "{}", String::from_utf8_lossy(&stopped.stderr));
    let left: Vec<u32> = everything.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "still running after --stop: {left:?}");
    assert!(!dir.join("pids").exists(), "the PID record is removed");
}
