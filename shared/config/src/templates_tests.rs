use super::*;

fn table(text: &str) -> Option<toml::Value> {
    let parsed: toml::Table = text.parse().expect("toml");
    parsed.get("templates").cloned()
}

#[test]
fn the_built_ins_are_desktop_browser_and_office() {
    let config = TemplatesConfig::default();
    let desktop = config.resolve(None).expect("the default template");
    assert_eq!(desktop.name, "desktop");
    assert_eq!(desktop.startup_apps().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["terminal"]);
    let browser = config.get("browser").expect("browser");
    assert_eq!(browser.startup_apps().map(|a| a.name.as_str()).collect::<Vec<_>>(), ["chromium"]);
    let chromium = browser.app("google-chrome").expect("the planner's name for it");
    for fact in
        ["--user-data-dir=\"$HOME/.config/chromium\"", "--remote-debugging-port=9222", "--remote-debugging-address=127.0.0.1"]
    {
        assert!(chromium.command.contains(fact), "{fact} in {}", chromium.command);
    }
    let firefox = browser.app("firefox").expect("firefox");
    assert!(!firefox.start, "Firefox waits to be asked for");
    assert!(browser.files.iter().any(|f| f.contents.contains("$HOME/Downloads")), "downloads go to ~/Downloads");
    let office = config.get("office").expect("office");
    for app in ["libreoffice", "files", "editor", "terminal"] {
        assert!(office.app(app).is_some(), "office has {app}");
    }
    assert!(office.app("chromium").is_none());
    assert!(office.packages.iter().all(|p| p != "libreoffice"), "calc and writer, not the whole suite");
}

#[test]
fn a_table_changes_a_built_in_or_makes_a_template() {
    let text = r#"
[templates.browser]
e2b_template = "abc123"
env = { START_URL = "http://example.test/" }

[templates.kiosk]
locale = "de_DE.UTF-8"
time_zone = "Europe/Berlin"
packages = ["surf"]
files = [{ path = "notes/todo.txt", contents = "hello" }]
apps = [{ name = "surf", command = "surf http://example.test", window_class = "surf", start = true }]
"#;
    let config = TemplatesConfig::load(table(text)).expect("loads");
    let browser = config.get("browser").expect("browser");
    assert_eq!(browser.e2b_template_id(), "abc123");
    assert_eq!(browser.env.get("START_URL").map(String::as_str), Some("http://example.test/"));
    assert!(browser.app("chromium").is_some(), "keys not listed stay the built-in's");
    assert_eq!(config.get("office").expect("office").e2b_template_id(), "office", "unmapped: the name itself");
    let kiosk = config.get("kiosk").expect("kiosk");
    assert_eq!((kiosk.locale.as_str(), kiosk.time_zone.as_str()), ("de_DE.UTF-8", "Europe/Berlin"));
    assert_eq!(kiosk.app("surf").expect("surf").required_programs(), ["surf"]);
    assert_eq!(kiosk.files[0].path, "notes/todo.txt");
}

#[test]
fn a_bad_table_is_named() {
    for (text, named) in [
        ("[templates.kiosk]\naps = []\n", "templates.kiosk"),
        ("[templates.Kiosk]\n", "templates.Kiosk"),
        ("templates = 3\n", "templates"),
        ("[templates.kiosk]\nfiles = [{ path = \"../x\", contents = \"\" }]\n", "templates.kiosk.files"),
        ("[templates.kiosk]\nfiles = [{ path = \"/etc/x\", contents = \"\" }]\n", "templates.kiosk.files"),
        ("[templates.kiosk]\nenv = { HOME = \"/\" }\n", "templates.kiosk.env"),
        ("[templates.kiosk]\nlocale = \"x; rm -rf\"\n", "templates.kiosk.locale"),
        ("[templates.kiosk]\napps = [{ name = \"a\", command = \"\", window_class = \"a\" }]\n", "templates.kiosk.apps"),
    ] {
        let err = TemplatesConfig::load(table(text)).expect_err(text);
        assert!(err.var.starts_with(named), "{text}: {err}");
    }
}

#[test]
fn a_missing_program_is_one_line_naming_the_template_and_program() {
    let config = TemplatesConfig::default();
    let err = config.check_installed(|program| program != "firefox-esr").expect_err("firefox-esr is missing");
    assert_eq!(
        err,
        "template \"browser\": app \"firefox\" needs firefox-esr, which is not installed (scripts/setup.sh installs it)"
    );
    assert!(!err.contains('\n'));
    config.check_installed(|_| true).expect("all there");
}

#[test]
fn the_open_script_quotes_what_it_runs() {
    let app = App {
        name: "x".into(),
        command: "echo 'it''s' && exec x".into(),
        window_class: "a'b".into(),
        start: false,
        programs: vec![],
    };
    let script = app.open_script(5);
    assert!(script.contains(r"'a'\''b'"), "{script}");
    assert!(script.contains("-lt 50"), "{script}");
    assert_eq!(canonical_app_name("Google-Chrome"), "chromium");
    assert_eq!(canonical_app_name("vscode"), "editor");
    assert_eq!(canonical_app_name("gimp"), "gimp");
}
