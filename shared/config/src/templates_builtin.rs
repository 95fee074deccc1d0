//! The built-in templates: `desktop` (a terminal), `browser` (Chromium;
//! Firefox ESR beside it) and `office` (LibreOffice, a file manager, a text
//! editor). Every template has a `terminal` it does not start.
//!
//! Chromium runs with `--no-sandbox`: its own sandbox needs new user
//! namespaces (or a setuid helper), and the sandbox's seccomp filter refuses
//! `unshare`, `setns` and namespace flags to every program in it; the jail
//! is the wall around the browser. Its profile lives at
//! `$HOME/.config/chromium`, downloads go to `$HOME/Downloads` without a
//! prompt, and its DevTools port (9222) listens on the sandbox's own
//! loopback only (the sandbox has its own network namespace).

use std::collections::BTreeMap;

use super::templates::{
    App, Template, TemplateFile, CHROMIUM_DEBUGGING_PORT, CHROMIUM_PROFILE_DIR, DEFAULT_START_URL, DOWNLOADS_DIR, TERMINAL_TITLE,
};

/// The built-in templates.
pub(super) fn builtins() -> Vec<Template> {
    vec![desktop(), browser(), office()]
}

fn app(name: &str, command: String, window_class: &str, start: bool, programs: &[&str]) -> App {
    App {
        name: name.to_owned(),
        command,
        window_class: window_class.to_owned(),
        start,
        programs: programs.iter().map(|p| (*p).to_owned()).collect(),
    }
}

/// The maximized xterm titled `flotilla-terminal` running a clean bash.
pub fn terminal(start: bool) -> App {
    let command =
        format!("exec xterm -title {TERMINAL_TITLE} -maximized +bc -fa Monospace -fs 11 -sl 2000 -e bash --noprofile --norc -i");
    app("terminal", command, "xterm", start, &["xterm"])
}

fn desktop() -> Template {
    Template {
        apps: vec![terminal(true)],
        packages: vec!["xterm".into(), "fonts-dejavu-core".into()],
        ..Template::empty("desktop")
    }
}

/// Chromium, maximized, without first-run pages, opening `$START_URL`.
pub fn chromium(start: bool) -> App {
    let command = format!(
        "mkdir -p \"$HOME/{DOWNLOADS_DIR}\" && exec chromium --no-sandbox --user-data-dir=\"$HOME/{CHROMIUM_PROFILE_DIR}\" \
         --remote-debugging-port={CHROMIUM_DEBUGGING_PORT} --remote-debugging-address=127.0.0.1 \
         --no-first-run --no-default-browser-check --disable-gpu --ozone-platform=x11 --start-maximized \
         --password-store=basic --disable-background-networking --disable-component-update --disable-sync \
         --disable-features=Translate,MediaRouter --renderer-process-limit=4 --test-type \
         \"${{START_URL:-{DEFAULT_START_URL}}}\""
    );
    app("chromium", command, "chromium", start, &["chromium"])
}

/// Firefox ESR in a profile of its own under the home.
pub fn firefox(start: bool) -> App {
    let command = "mkdir -p \"$HOME/.mozilla/flotilla\" \"$HOME/Downloads\" && cp -f \"$HOME/.mozilla/user.js\" \
                   \"$HOME/.mozilla/flotilla/user.js\" 2>/dev/null; exec firefox-esr --no-remote \
                   --profile \"$HOME/.mozilla/flotilla\" \"${START_URL:-about:blank}\""
        .to_owned();
    app("firefox", command, "firefox-esr", start, &["firefox-esr"])
}

fn browser() -> Template {
    let preferences = format!(
        "{{\"download\":{{\"default_directory\":\"$HOME/{DOWNLOADS_DIR}\",\"prompt_for_download\":false,\
         \"directory_upgrade\":true}},\"browser\":{{\"has_seen_welcome_page\":true,\"check_default_browser\":false}},\
         \"savefile\":{{\"default_directory\":\"$HOME/{DOWNLOADS_DIR}\"}}}}"
    );
    let firefox_prefs = [
        ("browser.shell.checkDefaultBrowser", "false"),
        ("browser.startup.homepage_override.mstone", "\"ignore\""),
        ("browser.aboutwelcome.enabled", "false"),
        ("datareporting.policy.dataSubmissionEnabled", "false"),
        ("toolkit.telemetry.reportingpolicy.firstRun", "false"),
        ("browser.download.folderList", "2"),
        ("browser.download.dir", "\"$HOME/Downloads\""),
        ("browser.download.useDownloadDir", "true"),
        ("app.update.enabled", "false"),
    ];
    let user_js: String = firefox_prefs.iter().map(|(k, v)| format!("user_pref(\"{k}\", {v});\n")).collect();
    Template {
        apps: vec![chromium(true), firefox(false), terminal(false)],
        files: vec![
            TemplateFile { path: format!("{CHROMIUM_PROFILE_DIR}/Default/Preferences"), contents: preferences },
            TemplateFile { path: ".mozilla/user.js".into(), contents: user_js },
        ],
        env: BTreeMap::new(),
        packages: ["chromium", "firefox-esr", "fonts-dejavu-core", "xdotool", "xterm"].map(String::from).to_vec(),
        ..Template::empty("browser")
    }
}

fn office() -> Template {
    let libreoffice = app(
        "libreoffice",
        "exec soffice --nologo --norestore --nolockcheck --calc".to_owned(),
        "libreoffice",
        true,
        &["soffice"],
    );
    let files = app("files", "exec pcmanfm \"$HOME\"".to_owned(), "pcmanfm", false, &["pcmanfm"]);
    let editor = app("editor", "exec mousepad".to_owned(), "mousepad", false, &["mousepad"]);
    Template {
        apps: vec![libreoffice, files, editor, terminal(false)],
        packages: ["libreoffice-calc", "libreoffice-writer", "pcmanfm", "mousepad", "fonts-dejavu-core", "xdotool", "xterm"]
            .map(String::from)
            .to_vec(),
        ..Template::empty("office")
    }
}
