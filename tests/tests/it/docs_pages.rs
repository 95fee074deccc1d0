//! The reference pages say what the code does: the configuration page's
//! tables name exactly the settings the typed configuration reads, the
//! README's set-up table names every Debian package set-up installs, and
//! the README stays short enough to read in minutes.

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
    let setup = repo_file("scripts/setup.sh");
    let readme = repo_file("README.md");
    let table: String = readme.lines().filter(|l| l.starts_with('|')).collect::<Vec<_>>().join("\n");
    let mut packages = BTreeSet::new();
    for list in ["APT_TOOLS=(", "APT_PACKAGES=("] {
        let body = setup.split(list).nth(1).and_then(|rest| rest.split("\n)").next()).expect(list);
        for line in body.lines().map(str::trim).filter(|l| l.starts_with('"')) {
            let entry = line.trim_matches('"');
            packages.insert(entry.rsplit(':').next().unwrap_or(entry).to_owned());
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
