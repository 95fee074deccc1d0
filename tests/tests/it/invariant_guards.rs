//! Every invariant ARCHITECTURE.md states names the tests that guard it, and
//! every test it names exists.
//!
//! An invariant is a bullet of the `## Invariants` section that opens with a
//! bold title (`- **…**`, nested bullets too), or, elsewhere, the text of a
//! list item from an `Invariant:` to the next one or the item's end. Its
//! guards are the backticked names of its last "Guarded by" clause, which
//! ends at a `.` or `;` or at a `)` that closes a parenthesis opened before
//! it; names inside a parenthesis of the clause are remarks, not guards.
//!
//! A guard is a path as nextest prints it, without the crate: the module
//! path inside its crate and the test's name (`queue::a_stale_attempt_…`,
//! `escape_tests::…` in `flotilla-desktop`), or a module whose tests all guard it.
//! The path is looked for in each crate (this binary's `tests/tests/it/`,
//! then the `shared/` crates, the sandbox crates, `sandboxd`, `worker`,
//! `api`, `client`, `mcp` and `cli`) and must be found in exactly one: its module is the longest prefix that is a file, the rest inline
//! `mod`s of that file read with `syn`, and the last segment a `#[test]`
//! function there (or in a `proptest!` block) or a module holding one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Invariants no test checks yet, by title, each with why.
const UNGUARDED: &[(&str, &str)] = &[(
    "Following the feeds costs a worker a fixed few round trips per read, not per event",
    "only `flotilla-webhook-bench` measures it; no test counts a dispatcher pass's round trips",
)];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An invariant as written: a short title and its text.
#[derive(Debug)]
struct Invariant {
    title: String,
    text: String,
}

/// The list items of a Markdown text: each starts at a line `- ` (any
/// indent) and runs until the next such line, a blank line or a heading.
fn list_items(section: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut current: Option<String> = None;
    for line in section.lines() {
        let trimmed = line.trim_start();
        if let Some(item) = trimmed.strip_prefix("- ") {
            items.extend(current.take());
            current = Some(item.to_owned());
        } else if trimmed.is_empty() || trimmed.starts_with('#') {
            items.extend(current.take());
        } else if let Some(item) = current.as_mut() {
            item.push(' ');
            item.push_str(trimmed);
        }
    }
    items.extend(current);
    items
}

/// The invariants of an architecture document.
fn invariants(doc: &str) -> Vec<Invariant> {
    let mut found = Vec::new();
    let mut sections: Vec<(&str, String)> = Vec::new();
    for line in doc.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            sections.push((heading, String::new()));
            continue;
        }
        if let Some((_, text)) = sections.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    for (heading, text) in &sections {
        for item in list_items(text) {
            if *heading == "Invariants" {
                let Some(rest) = item.strip_prefix("**") else { continue };
                let title = rest.split("**").next().unwrap_or_default().trim_end_matches('.').to_owned();
                found.push(Invariant { title, text: item.clone() });
                continue;
            }
            let lower = item.to_lowercase();
            let starts: Vec<usize> = lower.match_indices("invariant:").map(|(at, _)| at).collect();
            for (n, start) in starts.iter().enumerate() {
                let end = starts.get(n + 1).copied().unwrap_or(item.len());
                let text = &item[start + "invariant:".len()..end];
                let title = text.split_whitespace().take(8).collect::<Vec<_>>().join(" ");
                found.push(Invariant { title, text: text.to_owned() });
            }
        }
    }
    found
}

/// The names an invariant's last "Guarded by" clause gives, or `None` when
/// it has none.
fn guards(text: &str) -> Option<Vec<String>> {
    let start = text.to_lowercase().rfind("guarded by")? + "guarded by".len();
    let mut names = Vec::new();
    let mut depth = 0usize;
    let mut chars = text[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '`' => {
                let name: String = chars.by_ref().take_while(|c| *c != '`').collect();
                if depth == 0 {
                    names.push(name);
                }
            }
            '(' => depth += 1,
            ')' if depth == 0 => break,
            ')' => depth -= 1,
            '.' | ';' if depth == 0 => break,
            _ => {}
        }
    }
    Some(names)
}

/// A crate's modules: the module path of every `.rs` file under its root.
fn modules_of(root: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut modules = BTreeMap::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() && path != root.join("bin") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).expect("under the root").with_extension("");
                let mut parts: Vec<String> =
                    relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
                if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                    parts.pop();
                }
                modules.insert(parts, path);
            }
        }
    }
    modules
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

fn holds_a_test(items: &[syn::Item]) -> bool {
    items.iter().any(|item| match item {
        syn::Item::Fn(f) => is_test(&f.attrs),
        syn::Item::Mod(m) => m.content.as_ref().is_some_and(|(_, items)| holds_a_test(items)),
        _ => false,
    })
}

/// Whether `rest` names a test (or a module of tests) among `items`.
fn names_a_test(items: &[syn::Item], rest: &[String]) -> bool {
    let Some((first, tail)) = rest.split_first() else { return holds_a_test(items) };
    items.iter().any(|item| match item {
        syn::Item::Fn(f) => tail.is_empty() && f.sig.ident == first && is_test(&f.attrs),
        syn::Item::Mod(m) => m.ident == first && m.content.as_ref().is_some_and(|(_, items)| names_a_test(items, tail)),
        syn::Item::Macro(m) => {
            tail.is_empty()
                && m.mac.path.segments.last().is_some_and(|s| s.ident == "proptest")
                && declares_fn(&m.mac.tokens, first)
        }
        _ => false,
    })
}

/// Whether a macro's body declares `fn name` (the tests of a `proptest!`).
fn declares_fn(tokens: &impl ToString, name: &str) -> bool {
    let text = tokens.to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    words.windows(2).any(|w| w[0] == "fn" && w[1].strip_suffix('(').unwrap_or(w[1]) == name)
}

/// Source files read with `syn`, each parsed once (`None`: it does not parse).
type Parsed = BTreeMap<PathBuf, Option<syn::File>>;

/// Whether a crate whose modules are `modules` has the test `name`.
fn crate_has(modules: &BTreeMap<Vec<String>, PathBuf>, parsed: &mut Parsed, name: &str) -> bool {
    let segments: Vec<String> = name.split("::").map(str::to_owned).collect();
    (0..=segments.len()).rev().any(|cut| {
        let Some(file) = modules.get(&segments[..cut]) else { return false };
        let source = parsed
            .entry(file.clone())
            .or_insert_with(|| syn::parse_file(&std::fs::read_to_string(file).expect("readable source")).ok());
        source.as_ref().is_some_and(|source| names_a_test(&source.items, &segments[cut..]))
    })
}

/// The crates a guard may name a test of, with their module roots, in the
/// order they are searched.
const CRATES: [(&str, &str); 15] = [
    ("flotilla-tests (it)", "tests/tests/it"),
    ("flotilla-types", "shared/types/src"),
    ("flotilla-config", "shared/config/src"),
    ("flotilla-blobstore", "shared/blobstore/src"),
    ("flotilla-telemetry", "shared/telemetry/src"),
    ("flotilla-queue", "shared/queue/src"),
    ("flotilla-sandbox", "sandbox/provider/src"),
    ("flotilla-desktop", "sandbox/desktop/src"),
    ("flotilla-e2b", "sandbox/e2b/src"),
    ("flotilla-sandboxd", "sandboxd/src"),
    ("flotilla-worker", "worker/src"),
    ("flotilla-api", "api/src"),
    ("flotilla-client", "client/src"),
    ("flotilla-mcp", "mcp/src"),
    ("flotilla-cli", "cli/src"),
];

/// What is wrong with the guards of `doc`'s invariants, one line each.
fn problems(doc: &str, root: &Path, unguarded: &[(&str, &str)]) -> Vec<String> {
    let crates: Vec<_> = CRATES.iter().map(|(name, dir)| (*name, modules_of(&root.join(dir)))).collect();
    let mut parsed = Parsed::new();
    let mut problems = Vec::new();
    let found = invariants(doc);
    for invariant in &found {
        let allowed = unguarded.iter().any(|(title, _)| *title == invariant.title);
        let Some(names) = guards(&invariant.text) else {
            if !allowed {
                problems.push(format!("invariant \"{}\" names no test (\"Guarded by `…`.\")", invariant.title));
            }
            continue;
        };
        if allowed {
            problems.push(format!("invariant \"{}\" names guards but is listed as unguarded", invariant.title));
        }
        if names.is_empty() {
            problems.push(format!("invariant \"{}\": its \"Guarded by\" names nothing", invariant.title));
        }
        for name in names {
            let holders: Vec<&str> = crates.iter().filter(|(_, m)| crate_has(m, &mut parsed, &name)).map(|(c, _)| *c).collect();
            match holders.as_slice() {
                [_] => {}
                [] => problems.push(format!("invariant \"{}\" names `{name}`, which is no test of any crate", invariant.title)),
                many => {
                    problems.push(format!("invariant \"{}\" names `{name}`, a test of several crates: {many:?}", invariant.title))
                }
            }
        }
    }
    for (title, _) in unguarded {
        if !found.iter().any(|i| i.title == *title) {
            problems.push(format!("\"{title}\" is listed as unguarded but is no invariant of the document"));
        }
    }
    problems
}

#[test]
fn every_invariant_names_tests_that_exist() {
    let root = repo_root();
    let doc = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(invariants(&doc).len() > 30, "too few invariants found: {:#?}", invariants(&doc));
    let problems = problems(&doc, &root, UNGUARDED);
    assert!(problems.is_empty(), "ARCHITECTURE.md:\n{}", problems.join("\n"));
}

#[test]
fn a_misspelt_or_missing_guard_is_named() {
    let doc =
        "## Code map\n\n- `page.rs` — pages. Invariant: a cursor is a position (guarded by `pagination::no_such_test`).\n\n\
               ## Invariants\n\n\
               - **Layering holds.** Guarded by `layering::no_two_source_files_of_a_crate_use_each_other` (and `x::y`).\n\
               - **A module and a property.** Guarded by `isolation_tests` and\n  \
                 `address::tests::an_embedded_ipv4_address_is_judged_as_itself`; the rest is `x::y`.\n\
               - **Misspelt.** Guarded by `layering::no_two_source_files_of_a_crate_use_each_othr`.\n\
               - **Not a test.** Guarded by `layering::repo_root`.\n\
               - **Bare.** Says nothing of its tests.\n\
               - **Allowed.** Checked by nothing yet.\n";
    let problems = problems(doc, &repo_root(), &[("Allowed", "no test yet"), ("Gone", "was removed")]);
    let expected = [
        "invariant \"a cursor is a position (guarded by `pagination::no_such_test`).\" names `pagination::no_such_test`, which is no test of any crate",
        "invariant \"Misspelt\" names `layering::no_two_source_files_of_a_crate_use_each_othr`, which is no test of any crate",
        "invariant \"Not a test\" names `layering::repo_root`, which is no test of any crate",
        "invariant \"Bare\" names no test (\"Guarded by `…`.\")",
        "\"Gone\" is listed as unguarded but is no invariant of the document",
    ];
    assert_eq!(problems, expected);
}
