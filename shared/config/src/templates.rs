//! Sandbox templates as data: what a desktop of each template runs and
//! holds. Built-ins `desktop` (a terminal), `browser` (Chromium; Firefox ESR
//! beside it) and `office` (LibreOffice, a file manager, a text editor),
//! then the file's `[templates.<name>]` tables: a table named after a
//! built-in changes the keys it lists, any other makes a template of its
//! own. Each table is read with unknown keys refused, so a typo stops the
//! process at start with one line naming it (`templates.kiosk.aps`).
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

use super::ConfigError;

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
    /// The programs it needs on the host, checked at start (the first
    /// word of `command` when empty).
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
        self.command.split_whitespace().next().map(|p| vec![p.to_owned()]).unwrap_or_default()
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

/// Every template this process knows: the built-ins and the file's tables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplatesConfig {
    templates: BTreeMap<String, Template>,
}

impl Default for TemplatesConfig {
    fn default() -> Self {
        let templates = super::templates_builtin::builtins().into_iter().map(|t| (t.name.clone(), t)).collect();
        Self { templates }
    }
}

/// A `[templates.<name>]` table: every key optional, so a table named after
/// a built-in changes only what it lists.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TemplateTable {
    apps: Option<Vec<App>>,
    env: Option<BTreeMap<String, String>>,
    files: Option<Vec<TemplateFile>>,
    locale: Option<String>,
    time_zone: Option<String>,
    packages: Option<Vec<String>>,
    e2b_template: Option<String>,
}

impl TemplatesConfig {
    /// The built-ins, changed and added to by the file's `templates` table.
    pub(super) fn load(table: Option<toml::Value>) -> Result<Self, ConfigError> {
        let mut config = Self::default();
        let Some(value) = table else { return Ok(config) };
        let toml::Value::Table(tables) = value else {
            return Err(ConfigError::new("templates", "must be a table of [templates.<name>] tables"));
        };
        for (name, value) in tables {
            let var = format!("templates.{name}");
            if !valid_name(&name) {
                return Err(ConfigError::new(&var, "a template's name is 1-64 of a-z 0-9 - _"));
            }
            let table: TemplateTable =
                serde_path_to_error::deserialize(value).map_err(|e| table_error(&var, e.path().to_string(), e.inner()))?;
            let template = config.templates.remove(&name).unwrap_or_else(|| Template::empty(&name));
            let template = table.apply(template);
            template.validate()?;
            config.templates.insert(name, template);
        }
        Ok(config)
    }

    /// Templates given directly (over the built-ins), for tests and tools.
    pub fn with(templates: impl IntoIterator<Item = Template>) -> Self {
        let mut config = Self::default();
        config.templates.extend(templates.into_iter().map(|t| (t.name.clone(), t)));
        config
    }

    /// The template named `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<&Template> {
        self.templates.get(name)
    }

    /// The template of a task naming `name`, or the default one.
    pub fn resolve(&self, name: Option<&str>) -> Option<&Template> {
        self.get(name.unwrap_or(DEFAULT_TEMPLATE))
    }

    pub fn iter(&self) -> impl Iterator<Item = &Template> {
        self.templates.values()
    }

    /// The first template whose app needs a program `found` says is
    /// missing, as one line: `template "browser": app "chromium" needs
    /// chromium, which is not installed (scripts/setup.sh installs it)`.
    pub fn check_installed(&self, found: impl Fn(&str) -> bool) -> Result<(), String> {
        for template in self.iter() {
            if let Some((app, program)) = template.missing_programs(&found).into_iter().next() {
                return Err(format!(
                    "template {:?}: app {app:?} needs {program}, which is not installed (scripts/setup.sh installs it)",
                    template.name
                ));
            }
        }
        Ok(())
    }
}

/// Whether `program` is on the host's `PATH` (or, with a slash, exists).
pub fn program_on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |path: &std::path::Path| std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).any(|dir| executable(&dir.join(program)))
}

impl TemplateTable {
    fn apply(self, mut template: Template) -> Template {
        if let Some(apps) = self.apps {
            template.apps = apps;
        }
        if let Some(env) = self.env {
            template.env = env;
        }
        if let Some(files) = self.files {
            template.files = files;
        }
        if let Some(locale) = self.locale {
            template.locale = locale;
        }
        if let Some(time_zone) = self.time_zone {
            template.time_zone = time_zone;
        }
        if let Some(packages) = self.packages {
            template.packages = packages;
        }
        if self.e2b_template.is_some() {
            template.e2b_template = self.e2b_template;
        }
        template
    }
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

    fn validate(&self) -> Result<(), ConfigError> {
        let var = |key: &str| format!("templates.{}.{key}", self.name);
        for app in &self.apps {
            if !valid_name(&app.name) || app.command.trim().is_empty() || app.window_class.trim().is_empty() {
                return Err(ConfigError::new(
                    &var("apps"),
                    format!("app {:?} needs a name (a-z 0-9 - _), a command and a window_class", app.name),
                ));
            }
        }
        for file in &self.files {
            let bad = file.path.is_empty()
                || file.path.starts_with('/')
                || file.path.split('/').any(|part| part == ".." || part.is_empty())
                || file.path.contains('\0');
            if bad {
                return Err(ConfigError::new(&var("files"), format!("{:?} is not a path inside the home", file.path)));
            }
        }
        for key in self.env.keys() {
            let ok = !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok
                || key.starts_with("FLOTILLA_")
                || matches!(key.as_str(), "HOME" | "DISPLAY" | "XAUTHORITY" | "PATH" | "TMPDIR")
            {
                return Err(ConfigError::new(&var("env"), format!("{key:?} cannot be set by a template")));
            }
        }
        let plain = |text: &str| !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "._-/+@".contains(c));
        if !plain(&self.locale) {
            return Err(ConfigError::new(&var("locale"), format!("{:?} is not a locale name", self.locale)));
        }
        if !plain(&self.time_zone) {
            return Err(ConfigError::new(&var("time_zone"), format!("{:?} is not a time zone name", self.time_zone)));
        }
        Ok(())
    }
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len()) && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
}

fn table_error(var: &str, path: String, error: &toml::de::Error) -> ConfigError {
    let message = error.message().trim().to_owned();
    match path.as_str() {
        "" | "." => ConfigError::new(var, message),
        _ => ConfigError::new(&format!("{var}.{path}"), message),
    }
}

#[cfg(test)]
#[path = "templates_tests.rs"]
mod tests;
