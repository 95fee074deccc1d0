//! A template's start-up on a local desktop: its files placed in the home
//! (written from inside the sandbox, whose home is its own tmpfs), its
//! start-up apps spawned while the window manager starts (each waits for
//! one line on its stdin before it runs, so the window manager places its
//! window as any other), and, once released, their windows waited for by
//! `WM_CLASS`, with the desktop's deadline; the last one is activated.

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_config::Template;
use flotilla_sandbox::SandboxError;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;

use super::desktop::{log_tail, spawn_in_group, Processes};
use super::display::Display;
use super::launch::Launcher;
use super::process;

/// How often a start-up app's window is looked for.
const WINDOW_POLL: Duration = Duration::from_millis(10);
/// How long placing a template's files may take.
const FILES_TIMEOUT: Duration = Duration::from_secs(10);
/// Writes each `path contents` pair of its arguments under the home.
const WRITE_FILES: &str =
    r#"while [ "$#" -gt 1 ]; do mkdir -p -- "$(dirname -- "$1")" && printf %s "$2" > "$1" || exit 1; shift 2; done"#;

/// A start-up app spawned and waiting for its word.
pub(crate) struct Waiting {
    name: String,
    window_class: String,
    go: Option<ChildStdin>,
    log: std::path::PathBuf,
}

/// The environment a template gives every program of the sandbox: its
/// locale, time zone and own variables.
pub(crate) fn environment(template: &Template) -> Vec<(String, String)> {
    let mut env = vec![
        ("LANG".to_owned(), template.locale.clone()),
        ("LC_ALL".to_owned(), template.locale.clone()),
        ("TZ".to_owned(), template.time_zone.clone()),
    ];
    env.extend(template.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// Writes the template's files into the sandbox's home, `$HOME` in their
/// text standing for it.
pub(crate) async fn place_files(launcher: &Launcher, template: &Template) -> Result<(), SandboxError> {
    if template.files.is_empty() {
        return Ok(());
    }
    let home = launcher.home.display().to_string();
    let mut args =
        vec!["--noprofile".to_owned(), "--norc".to_owned(), "-c".to_owned(), WRITE_FILES.to_owned(), "files".to_owned()];
    for file in &template.files {
        args.push(file.path.clone());
        args.push(file.contents.replace("$HOME", &home));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let command = launcher.command("bash", &args);
    let output = process::run(command, None, FILES_TIMEOUT, process::MAX_OUTPUT).await?;
    if output.exit_code != 0 {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(SandboxError::Unavailable(format!(
            "template {:?}: cannot place its files: {}",
            template.name,
            stderr.lines().next().unwrap_or("failed").trim()
        )));
    }
    Ok(())
}

/// Spawns the template's start-up apps, each waiting for its word.
pub(crate) fn spawn_startup(
    processes: &mut Processes,
    launcher: &Launcher,
    template: &Template,
    logs: &Path,
) -> Result<Vec<Waiting>, SandboxError> {
    let mut waiting = Vec::new();
    for app in template.startup_apps() {
        let log = logs.join(format!("{}.log", app.name));
        let mut command = launcher.command("sh", &["-c", r#"read -r go && exec sh -c "$1""#, &app.name, &app.command]);
        command.stdin(Stdio::piped());
        let mut child = spawn_in_group(&mut command, processes.pgid(), &log, false)?;
        let go = child.stdin.take();
        processes.adopt(child);
        waiting.push(Waiting { name: app.name.clone(), window_class: app.window_class.clone(), go, log });
    }
    Ok(waiting)
}

/// Lets every waiting app start, then waits until each has a mapped
/// window of its class, or the deadline passes.
pub(crate) async fn release_and_wait(
    display: &Arc<Display>,
    waiting: Vec<Waiting>,
    deadline: Instant,
) -> Result<(), SandboxError> {
    let mut waiting = waiting;
    for app in &mut waiting {
        if let Some(mut go) = app.go.take() {
            // An app that is already gone shows in the wait below.
            let _ = go.write_all(b"go\n").await;
        }
    }
    let mut last = None;
    for app in &waiting {
        loop {
            let probe = Arc::clone(display);
            let class = app.window_class.clone();
            let found = tokio::task::spawn_blocking(move || probe.find_class(&class))
                .await
                .map_err(|e| SandboxError::Display(e.to_string()))??;
            if found.is_some() {
                last = found;
                break;
            }
            if Instant::now() >= deadline {
                return Err(SandboxError::Unavailable(format!("the {} window did not appear: {}", app.name, log_tail(&app.log))));
            }
            tokio::time::sleep(WINDOW_POLL).await;
        }
    }
    // The last start-up app is the one in front, with the keyboard's focus.
    if let Some(window) = last {
        let display = Arc::clone(display);
        tokio::task::spawn_blocking(move || display.activate(window))
            .await
            .map_err(|e| SandboxError::Display(e.to_string()))??;
    }
    Ok(())
}
