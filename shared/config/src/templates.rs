//! Sandbox templates as data: what a desktop of each template runs and
//! holds. Built-ins `desktop` (a terminal), `browser` (Chromium; Firefox ESR
//! beside it) and `office` (LibreOffice, a file manager, a text editor),
//! then the file's `[templates.<name>]` tables: a table named after a
//! built-in changes the keys it lists, any other makes a template of its
//! own. Each table is read with unknown keys refused, so a typo stops the
//! process at start with one line naming it (`templates.kiosk.aps`); the
//! loading is in `templates_config.rs`, the built-ins in
//! `templates_builtin.rs`.
//!
//! A template names its apps by the names the planner uses (`chromium`,
//! `firefox`, `libreoffice`, `files`, `editor`, `terminal`): the command
//! (run by `sh -c` inside the sandbox, so `$HOME` works), the window class
//! to wait for and focus, and whether it starts with the desktop. Both the
//! local desktop (which starts the start-up apps and waits for their
//! windows) and the worker (which opens the planner's app in a running
//! sandbox of any provider with [`App::open_script`]) read the same data.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The template of a task that names none.
pub const DEFAULT_TEMPLATE: &str = "desktop";
/// Chromium's DevTools port, on the sandbox's own loopback only.
pub const CHROMIUM_DEBUGGING_PORT: u16 = 9222;
/// Chromium's profile, relative to the sandbox's home.
pub const CHROMIUM_PROFILE_DIR: &str = ".config/chromium";
/// Where browsers save downloads, relative to the sandbox's home.
pub const DOWNLOADS_DIR: &str = "Downloads";
/// The page the `browser` template's Chromium opens first.
pub const DEFAULT_START_URL: &str = "about:blank";
/// The title of the `desktop` template's terminal.
pub const TERMINAL_TITLE: &str = "flotilla-terminal";

/// One application of a template.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct App {
    /// The name the planner uses for it (`chromium`, `firefox`, …).
    pub name: String,
    /// What starts it: a shell command run by `sh -c` in the sandbox's home.
    pub command: String,
    /// The WM_CLASS (instance or class, any case) of its window, which is
    /// waited for and focused.
    pub window_class: String,
    /// Whether it starts with the desktop (and the desktop waits for its window).
    #[serde(default)]
    pub start: bool,
    /// The programs it needs on the host, checked at start (when empty,
    /// the first word of `command` past `exec`, `env` and assignments).
    #[serde(default)]
    pub programs: Vec<String>,
}

/// A file placed in the sandbox's home before anything starts.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateFile {
    /// Relative to the home; no `..`.
    pub path: String,
    /// Its text; `$HOME` stands for the sandbox's home.
    pub contents: String,
}

/// What a desktop of one template runs and holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub name: String,
    /// Its applications; those with `start` come up with the desktop, in order.
    pub apps: Vec<App>,
    /// Environment of every program in the sandbox (over the sandbox's own).
    pub env: BTreeMap<String, String>,
    /// Files placed in the home.
    pub files: Vec<TemplateFile>,
    /// `LANG`/`LC_ALL` of the sandbox's programs.
    pub locale: String,
    /// `TZ` of the sandbox's programs.
    pub time_zone: String,
    /// The Debian packages the apps need (what `scripts/setup.sh` installs).
    pub packages: Vec<String>,
    /// The E2B template id a task of this template gets on E2B; the name
    /// itself when unset.
    pub e2b_template: Option<String>,
}

impl Template {
    /// The app the planner calls `name`, if the template has it. Aliases the
    /// planner may use (`google-chrome`, `chrome`, `firefox-esr`, …) name
    /// the same app.
    pub fn app(&self, name: &str) -> Option<&App> {
        let wanted = canonical_app_name(name);
        self.apps.iter().find(|app| app.name.eq_ignore_ascii_case(&wanted))
    }

    /// The apps that start with the desktop, in order.
    pub fn startup_apps(&self) -> impl Iterator<Item = &App> {
        self.apps.iter().filter(|app| app.start)
    }

    /// The E2B template this template maps to.
    pub fn e2b_template_id(&self) -> &str {
        self.e2b_template.as_deref().unwrap_or(&self.name)
    }

    /// `(app, program)` for each program an app needs that `found` says is
    /// missing.
    pub fn missing_programs(&self, found: impl Fn(&str) -> bool) -> Vec<(String, String)> {
        let mut missing = Vec::new();
        for app in &self.apps {
            for program in app.required_programs() {
                if !found(&program) {
                    missing.push((app.name.clone(), program));
                }
            }
        }
        missing
    }
}

impl App {
    /// The programs that must be on the host for the app to start.
    pub fn required_programs(&self) -> Vec<String> {
        if !self.programs.is_empty() {
            return self.programs.clone();
        }
        let program = self.command.split_whitespace().find(|word| !matches!(*word, "exec" | "env") && !word.contains('='));
        program.map(|p| vec![p.to_owned()]).unwrap_or_default()
    }

    /// A shell script that focuses the app's window, starting the app first
    /// (detached, its output to `/tmp`) when no window of its class is
    /// mapped, and waits up to `wait_s` seconds for the window. Exits 0 once
    /// the window is active, 3 when it never appeared. Needs `xdotool` in
    /// the sandbox (the local desktops and E2B's desktop have it).
    pub fn open_script(&self, wait_s: u32) -> String {
        let class = shell_quote(&self.window_class);
        let log = shell_quote(&format!("/tmp/flotilla-app-{}.log", self.name));
        let command = shell_quote(&self.command);
        format!(
            "w=$(xdotool search --onlyvisible --classname {class} 2>/dev/null | tail -n1); \
             [ -n \"$w\" ] || w=$(xdotool search --onlyvisible --class {class} 2>/dev/null | tail -n1); \
             if [ -z \"$w\" ]; then \
               (setsid sh -c {command} >{log} 2>&1 </dev/null &); \
               i=0; while [ $i -lt {polls} ]; do \
                 w=$(xdotool search --onlyvisible --classname {class} 2>/dev/null | tail -n1); \
                 [ -n \"$w\" ] || w=$(xdotool search --onlyvisible --class {class} 2>/dev/null | tail -n1); \
                 [ -n \"$w\" ] && break; sleep 0.1; i=$((i+1)); \
               done; \
             fi; \
             [ -n \"$w\" ] || {{ echo \"no window of class {shown} appeared\" >&2; exit 3; }}; \
             xdotool windowactivate --sync \"$w\" 2>/dev/null || xdotool windowfocus --sync \"$w\"; \
             xdotool windowraise \"$w\" 2>/dev/null; echo \"$w\"",
            polls = wait_s.saturating_mul(10),
            shown = self.window_class.replace(['"', '\'', '\\', '$', '`'], ""),
        )
    }

    /// A shell script that stops the app (every process whose command line
    /// starts with its program) and waits up to `wait_s` seconds for it to go.
    pub fn stop_script(&self, wait_s: u32) -> String {
        let program = shell_quote(self.required_programs().first().map_or("", String::as_str));
        format!(
            "pkill -TERM -x {program} 2>/dev/null; pkill -TERM -f \"^/usr/lib/\"{program} 2>/dev/null; \
             i=0; while pgrep -x {program} >/dev/null 2>&1 && [ $i -lt {polls} ]; do sleep 0.1; i=$((i+1)); done; \
             pkill -KILL -x {program} 2>/dev/null; true",
            polls = wait_s.saturating_mul(10),
        )
    }
}

/// The name the built-in templates use for an app the planner may call
/// otherwise.
pub fn canonical_app_name(name: &str) -> String {
    let lower = name.trim().to_ascii_lowercase();
    let canonical = match lower.as_str() {
        "google-chrome" | "chrome" | "chromium-browser" | "browser" => "chromium",
        "firefox-esr" | "mozilla-firefox" => "firefox",
        "soffice" | "office" | "libreoffice-calc" | "libreoffice-writer" | "calc" | "writer" => "libreoffice",
        "file-manager" | "pcmanfm" | "nautilus" | "thunar" => "files",
        "text-editor" | "mousepad" | "gedit" | "vscode" | "code" => "editor",
        "xterm" | "shell" | "bash" => "terminal",
        _ => lower.as_str(),
    };
    canonical.to_owned()
}

fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

impl Template {
    /// A template with nothing in it yet.
    pub fn empty(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            apps: Vec::new(),
            env: BTreeMap::new(),
            files: Vec::new(),
            locale: "C.UTF-8".to_owned(),
            time_zone: "UTC".to_owned(),
            packages: Vec::new(),
            e2b_template: None,
        }
    }
}
