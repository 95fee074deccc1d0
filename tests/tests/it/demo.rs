//! `scripts/demo.sh --keep` as a newcomer uses it: the script runs the demo
//! batch on real local desktops, which the sandbox host serves to its workers (none runs under a worker), and leaves the fleet up; the dashboard address
//! it prints opens in a headless Chromium and, signed in with the printed key,
//! shows the demo's tasks with their screenshots (a PNG of the page is kept
//! under `<target>/test-artifacts/`); the batch's task with a step to confirm
//! waits until Approve is clicked there, then succeeds; the desktop kept
//! running is taken over in its pane, typed on with real key events through
//! noVNC, and handed back; `flotilla webhooks listen`, which the demo runs,
//! printed the batch's signed deliveries; the printed `flotilla` command, run as
//! printed in a fresh shell, submits one more task that succeeds; the printed
//! screenshot links answer 200; and `--stop` leaves none of the fleet's
//! processes (nor their children, such as the desktops) running.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use flotilla_tests::browser::Browser;
use flotilla_worker::sandbox::local::process::descendants;
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

/// The line printed after the one containing `label`, trimmed: for a
/// command, its last word is its argument.
fn line_after<'a>(output: &'a str, label: &str) -> &'a str {
    output
        .lines()
        .skip_while(|l| !l.contains(label))
        .nth(1)
        .map(str::trim)
        .unwrap_or_else(|| panic!("nothing printed after {label}:\n{output}"))
}

/// The detail pane shows `id` in `status`.
fn detail_in(id: &str, status: &str) -> String {
    format!(
        "document.getElementById('detail').dataset.taskId === '{id}' && \
         document.getElementById('detail-status').textContent === '{status}'"
    )
}

/// Opens the task's pane with a click on its id in the list (the id cell:
/// a wide row's middle can lie under the open pane beside the list).
async fn open_task(browser: &mut Browser, id: &str) {
    browser.click(&format!("#tasks tr[data-task-id=\"{id}\"] td:first-child")).await.expect("click the task's id");
    let opened = format!("document.getElementById('detail').dataset.taskId === '{id}'");
    browser.wait_for("the task's pane opens", &opened, SHOWN).await.expect("pane opened");
}

/// Opens the task from the list, waits for it to offer Approve, clicks it
/// and waits for the task to succeed.
async fn approve_in_the_dashboard(browser: &mut Browser, id: &str) {
    open_task(browser, id).await;
    let offered = format!(
        "{} && !document.getElementById('approve').hidden && \
         (li => !!li && li.textContent.includes('send the weekly report'))(document.querySelector('#events li[data-type=\"waiting\"]'))",
        detail_in(id, "waiting")
    );
    browser.wait_for("the approval task waits, saying for what", &offered, SHOWN).await.expect("approve offered");
    browser.click("#approve").await.expect("click Approve");
    browser.wait_for("the approved task succeeds", &detail_in(id, "succeeded"), SHOWN).await.expect("approved");
}

/// The live pane's noVNC canvas, as a JavaScript expression.
const PANE_CANVAS: &str =
    "(f => f && f.contentDocument && f.contentDocument.querySelector('#noVNC_container canvas'))(document.getElementById('live-frame'))";

/// A digest of the pane's canvas pixels (0 while it shows nothing).
fn canvas_digest() -> String {
    format!(
        "(c => {{ if (!c || c.width === 0) return 0; const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; \
         let h = 0; for (let i = 0; i < d.length; i += 4) h = (h * 31 + d[i] + d[i + 1] + d[i + 2]) % 1000000007; return h; }})({PANE_CANVAS})"
    )
}

/// Takes over the task `id` kept running, types a line on its desktop with
/// real key events through the pane's noVNC, sees the desktop change, and
/// hands it back with a message.
async fn take_over_type_and_hand_back(browser: &mut Browser, id: &str) {
    open_task(browser, id).await;
    let viewing = format!(
        "{} && !document.getElementById('live-frame').hidden && ({PANE_CANVAS} || {{}}).width > 0",
        detail_in(id, "running")
    );
    browser.wait_for("the pane shows the live desktop", &viewing, SHOWN).await.expect("live pane");
    browser.click("#take-over").await.expect("take over");
    let control = format!(
        "document.getElementById('live-mode').textContent === 'control' && !document.getElementById('hand-back').hidden && \
         document.getElementById('live-frame').src.includes('view_only=false') && ({PANE_CANVAS} || {{}}).width > 0"
    );
    browser.wait_for("the pane is in control", &control, SHOWN).await.expect("control");
    // The desktop as it stands: its digest the same on two reads in a row.
    let settled = format!(
        "(d => {{ const same = d !== 0 && d === window.lastDigest; window.lastDigest = d; return same; }})({})",
        canvas_digest()
    );
    browser.wait_for("the controlled desktop settles", &settled, SHOWN).await.expect("settled");
    let focused = format!(
        "(f => {{ f.contentWindow.focus(); const c = {PANE_CANVAS}; c.focus(); return f.contentDocument.activeElement === c; }})\
         (document.getElementById('live-frame'))"
    );
    browser.wait_for("the desktop has the keyboard", &focused, SHOWN).await.expect("focus");
    browser.press_keys("echo typed by a person 42\n").await.expect("type on the desktop");
    let changed = format!("{} !== window.lastDigest", canvas_digest());
    browser.wait_for("the typing shows on the desktop", &changed, SHOWN).await.expect("typed");
    let png = browser.screenshot_png().await.expect("screenshot of the page");
    std::fs::write(artifact_path().with_file_name("demo-takeover.png"), png).expect("write the screenshot");
    browser.type_into("#release-message", "typed a line for you").await.expect("type a message");
    browser.click("#hand-back").await.expect("hand back");
    let released = "document.querySelector('#events li[data-type=\"takeover\"]') !== null && \
        document.querySelector('#events li[data-type=\"released\"]') !== null && \
        document.getElementById('live-mode').textContent === 'view only'";
    browser.wait_for("the pane shows the hand-back", released, SHOWN).await.expect("handed back");
}

/// Waits until the listener's log has a checked delivery of `kind` about `about`.
async fn wait_for_delivery(log: &Path, kind: &str, about: &str) {
    let deadline = std::time::Instant::now() + SHOWN;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let delivered =
            text.lines().any(|l| l.starts_with("verified") && l.split_whitespace().nth(1) == Some(kind) && l.contains(about));
        if delivered {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no verified {kind} delivery about {about} in {}:\n{text}", log.display());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
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
        .filter(|l| l.trim_start().starts_with("seq ") && !l.contains("the same image as seq"))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .collect();
    assert!(!links.is_empty(), "no screenshot links printed:\n{out}");
    // Each stored image is linked once; a screen seen again names its first.
    let distinct: std::collections::HashSet<&String> = links.iter().collect();
    assert_eq!(distinct.len(), links.len(), "an image linked twice:\n{out}");
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
    // The desktops are the sandbox host's: none runs under a worker, and
    // the one the demo keeps is one of the host's.
    let program = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_owned();
    let displays_under = |pid: u32| descendants(pid).into_iter().filter(|&p| program(p) == "Xvfb").count();
    let workers: Vec<u32> = recorded.iter().copied().filter(|&p| program(p).starts_with("flotilla-worke")).collect();
    let hosts: Vec<u32> = recorded.iter().copied().filter(|&p| program(p).starts_with("flotilla-sandb")).collect();
    assert_eq!((workers.len(), hosts.len()), (2, 1), "two workers and a sandbox host among {recorded:?}");
    assert!(workers.iter().all(|&w| displays_under(w) == 0), "a desktop runs under a worker");
    assert!(displays_under(hosts[0]) >= 1, "the kept desktop runs under the sandbox host");
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

    // The batch's task with a sensitive step waits for a person: Approve in
    // the dashboard, and it goes on to succeed.
    let approve_command = line_after(&out, "a task that waits for your approval");
    let approval = approve_command.split_whitespace().last().expect("the approval task's id").to_owned();
    approve_in_the_dashboard(&mut browser, &approval).await;
    // The desktop kept running: Take over in its pane, type on it with the
    // keyboard, and Hand back.
    take_over_type_and_hand_back(&mut browser, &watched).await;
    browser.close().await;
    // `flotilla webhooks listen`, started by the demo, printed the batch's
    // deliveries, each checked against its signature.
    let batch = out
        .lines()
        .find_map(|l| l.strip_prefix("submitted batch "))
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no batch named:\n{out}"))
        .to_owned();
    let hooks_log = PathBuf::from(line_after(&out, "the signed webhook deliveries").trim_start_matches("tail -f "));
    for (kind, about) in [("task.waiting", &approval), ("task.succeeded", &approval), ("batch.completed", &batch)] {
        wait_for_delivery(&hooks_log, kind, about).await;
    }

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
    // The link opens the view page; its token rides in the fragment alone.
    let link = said.split_whitespace().find(|w| w.contains("/view?")).unwrap_or_else(|| panic!("{view_line}\n{said}"));
    let (page, fragment) = link.split_once('#').unwrap_or((link, ""));
    assert!(viewed.status.success() && !page.contains("token") && fragment.contains("token="), "{view_line}\n{said}");

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
    // The batch (its tasks, the approval's and the shop's), the desktop kept
    // running to watch, and the one submitted above.
    assert_eq!(json!(count), json!(DEMO_TASKS.parse::<usize>().expect("count") + 4), "{tasks}");

    // --stop leaves nothing of the fleet running.
    let everything = with_descendants(&recorded);
    let stopped = fleet.stop();
    assert!(stopped.status.success(), "{}", String::from_utf8_lossy(&stopped.stderr));
    let left: Vec<u32> = everything.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "still running after --stop: {left:?}");
    assert!(!dir.join("pids").exists(), "the PID record is removed");
}
