//! The reference pages say what the code does: the configuration page's
//! tables name exactly the settings the typed configuration reads, the
//! README's set-up table names every Debian package set-up installs, the
//! README stays short enough to read in minutes, and the kept set-up log of
//! a fresh machine shows set-up talking all the way to a running demo.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo_file(path: &str) -> String {
    let root: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `NAME`s in backticks of a line's cell.
fn names_in(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
}

#[test]
fn the_configuration_page_lists_exactly_the_settings_the_typed_config_reads() {
    let page = repo_file("docs/configuration.md");
    let listed: BTreeSet<&str> =
        page.lines().filter(|l| l.starts_with("| `")).flat_map(|l| names_in(l.split('|').nth(1).unwrap_or_default())).collect();
    let read: BTreeSet<&str> = flotilla_config::KNOWN_VARS.iter().map(|(var, _)| *var).collect();
    let unlisted: Vec<_> = read.difference(&listed).collect();
    let unread: Vec<_> = listed.difference(&read).collect();
    assert!(unlisted.is_empty(), "settings the configuration page does not list: {unlisted:?}");
    assert!(unread.is_empty(), "settings the configuration page lists that nothing reads: {unread:?}");
}

#[test]
fn the_readme_lists_every_package_setup_installs_and_stays_short() {
    let readme = repo_file("README.md");
    let table: String = readme.lines().filter(|l| l.starts_with('|')).collect::<Vec<_>>().join("\n");
    let mut packages = BTreeSet::new();
    for list in ["APT_TOOLS", "APT_PACKAGES", "DESKTOP_APT_TOOLS", "DESKTOP_APT_PACKAGES"] {
        for entry in crate::deploy_sandboxd::setup_list(list) {
            packages.insert(entry.rsplit(':').next().unwrap_or(&entry).to_owned());
        }
    }
    assert!(packages.len() > 20, "set-up's package lists were read: {packages:?}");
    let missing: Vec<_> = packages.iter().filter(|p| !table.contains(&format!("`{p}`"))).collect();
    assert!(missing.is_empty(), "packages set-up installs that the README's table leaves out: {missing:?}");
    for change in ["/dev/net/tun", "/etc/subuid"] {
        assert!(table.contains(change), "the README's table says set-up changes {change}");
    }
    let lines = readme.lines().count();
    assert!(lines < 300, "the README is {lines} lines; the reference belongs in docs/");
}

/// The seconds since the start of a line of a timed log
/// (`HH:MM:SS +  N.Ns  text`), and its text.
fn timed_line(line: &str) -> Option<(f64, &str)> {
    let (_, rest) = line.split_once(" +")?;
    let (seconds, text) = rest.trim_start().split_once("s  ")?;
    Some((seconds.parse().ok()?, text))
}

#[test]
fn the_fresh_machines_setup_log_is_never_silent_for_more_than_ten_seconds() {
    let log = repo_file("docs/setup-log.txt");
    let lines: Vec<(f64, &str)> = log
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| timed_line(l).unwrap_or_else(|| panic!("not a timed line: {l}")))
        .collect();
    assert!(lines.first().is_some_and(|(at, text)| *at == 0.0 && text.starts_with("setup: ")), "it starts with set-up");
    for step in ["installing", "cargo install", "cargo build", "fleet up: ", "9 tasks: 9 succeeded", "the store keeps"] {
        assert!(lines.iter().any(|(_, text)| text.contains(step)), "the log shows {step:?}");
    }
    for pair in lines.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap <= 10.0, "{gap:.1} s of silence before {:?}", pair[1].1);
    }
}
