//! The layering ARCHITECTURE.md describes has no back edge: within each crate, no
//! two source files use each other, directly or through others.
//!
//! Every file is a module; a file depends on another when it names an item of
//! it (`use crate::a::b`, `super::x`, `self::y` or a path in code). A module may
//! name what its ancestors declare (a parent is the façade of its children), so
//! edges to an ancestor are not counted; test modules (`#[cfg(test)]`) are left
//! out. Paths are read with `syn`, not by matching text.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// A module's path inside its crate: `["sandbox", "local", "jail"]`.
type ModPath = Vec<String>;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `src/`, with the module it is (binaries in `src/bin` are crates of their own).
fn modules_of(crate_dir: &Path) -> BTreeMap<ModPath, PathBuf> {
    let src = crate_dir.join("src");
    let mut modules = BTreeMap::new();
    let mut dirs = vec![src.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable source dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() && path != src.join("bin") {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                modules.insert(module_path(&src, &path), path);
            }
        }
    }
    modules
}

fn module_path(src: &Path, file: &Path) -> ModPath {
    let relative = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: ModPath = relative.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// Collects, as absolute module paths, every path a file names.
struct PathsNamed<'a> {
    here: &'a [String],
    children: BTreeSet<String>,
    found: Vec<ModPath>,
}

impl PathsNamed<'_> {
    fn absolute(&self, segments: &[String]) -> Option<ModPath> {
        let (first, rest) = segments.split_first()?;
        let mut base: ModPath = match first.as_str() {
            "crate" => Vec::new(),
            "self" => self.here.to_vec(),
            "super" => self.here[..self.here.len().saturating_sub(1)].to_vec(),
            child if self.children.contains(child) => {
                let mut p = self.here.to_vec();
                p.push(child.to_owned());
                return Some(p.into_iter().chain(rest.iter().cloned()).collect());
            }
            _ => return None,
        };
        let mut rest = rest;
        while let Some(("super", tail)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
            base.pop();
            rest = tail;
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    fn record(&mut self, segments: &[String]) {
        if let Some(path) = self.absolute(segments) {
            self.found.push(path);
        }
    }

    fn walk_use(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.walk_use(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.record_use_leaf(prefix, &n.ident),
            syn::UseTree::Rename(r) => self.record_use_leaf(prefix, &r.ident),
            syn::UseTree::Glob(_) => self.record(prefix),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| self.walk_use(prefix, t)),
        }
    }

    fn record_use_leaf(&mut self, prefix: &[String], ident: &syn::Ident) {
        let mut full = prefix.to_vec();
        if ident != "self" {
            full.push(ident.to_string());
        }
        self.record(&full);
    }
}

/// `#[cfg(test)]`: compiled into the crate's own unit tests only.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| a.path().is_ident("cfg") && a.meta.require_list().is_ok_and(|list| list.tokens.to_string() == "test"))
}

impl<'ast> Visit<'ast> for PathsNamed<'_> {
    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if !is_test_only(&item.attrs) {
            self.walk_use(&mut Vec::new(), &item.tree);
        }
    }

    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
        self.record(&segments);
        syn::visit::visit_path(self, path);
    }
}

/// The modules a file depends on, ancestors and itself left out.
fn dependencies(here: &ModPath, file: &Path, modules: &BTreeMap<ModPath, PathBuf>) -> BTreeSet<ModPath> {
    let text = std::fs::read_to_string(file).expect("readable source");
    let parsed = syn::parse_file(&text).unwrap_or_else(|e| panic!("{} does not parse: {e}", file.display()));
    let children = modules.keys().filter(|m| m.len() == here.len() + 1 && m.starts_with(here)).filter_map(|m| m.last().cloned());
    let mut visitor = PathsNamed { here, children: children.collect(), found: Vec::new() };
    visitor.visit_file(&parsed);
    visitor
        .found
        .iter()
        .filter_map(|path| (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains_key(p)))
        .filter(|target| !here.starts_with(target))
        .collect()
}

/// A cycle in the graph, if any, as the modules along it.
fn find_cycle(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Option<Vec<ModPath>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &ModPath,
        graph: &BTreeMap<ModPath, BTreeSet<ModPath>>,
        marks: &mut BTreeMap<ModPath, Mark>,
        stack: &mut Vec<ModPath>,
    ) -> Option<Vec<ModPath>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let start = stack.iter().position(|n| n == node).expect("open node is on the stack");
                return Some(stack[start..].iter().cloned().chain([node.clone()]).collect());
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Open);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    graph.keys().find_map(|node| visit(node, graph, &mut marks, &mut Vec::new()))
}

fn import_graph(crate_dir: &Path) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let modules = modules_of(crate_dir);
    modules.iter().map(|(here, file)| (here.clone(), dependencies(here, file, &modules))).collect()
}

fn shown(path: &ModPath) -> String {
    if path.is_empty() {
        "crate".to_owned()
    } else {
        path.join("::")
    }
}

#[test]
fn no_two_source_files_of_a_crate_use_each_other() {
    for crate_dir in [
        "shared/types",
        "shared/config",
        "shared/blobstore",
        "shared/telemetry",
        "shared/queue",
        "sandbox/provider",
        "sandbox/desktop",
        "sandbox/e2b",
        "sandboxd",
        "api",
        "worker",
        "client",
        "mcp",
        "cli",
    ] {
        let graph = import_graph(&repo_root().join(crate_dir));
        assert!(graph.len() > 1, "{crate_dir}: too few modules found ({})", graph.len());
        if let Some(cycle) = find_cycle(&graph) {
            let shown: Vec<String> = cycle.iter().map(shown).collect();
            panic!("{crate_dir}: import cycle {}", shown.join(" -> "));
        }
    }
}

#[test]
fn the_checker_sees_a_cycle_between_two_siblings() {
    let dir = std::env::temp_dir().join(format!("flotilla-layering-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("src/pipeline")).expect("temp dir");
    let files = [
        ("src/lib.rs", "mod pipeline;"),
        ("src/pipeline/mod.rs", "mod held; mod session;"),
        ("src/pipeline/held.rs", "use super::session::Session; pub struct Held;"),
        ("src/pipeline/session.rs", "pub struct Session(crate::pipeline::held::Held);"),
    ];
    for (name, text) in files {
        std::fs::write(dir.join(name), text).expect("write");
    }
    let cycle = find_cycle(&import_graph(&dir)).map(|c| c.iter().map(shown).collect::<Vec<_>>());
    std::fs::remove_dir_all(&dir).ok();
    let cycle = cycle.expect("held and session use each other");
    assert!(cycle.contains(&"pipeline::held".to_owned()) && cycle.contains(&"pipeline::session".to_owned()), "{cycle:?}");
}

/// The crates the task model's types crate must never link: a client that
/// wants a `TaskSpec` gets serde and nothing that talks to the world.
const IO_CRATES: [&str; 7] = ["redis", "deadpool-redis", "reqwest", "hyper", "tokio", "aws-", "opentelemetry"];

/// Every crate `package` links (normal dependencies, all features on).
fn linked_crates(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let output = std::process::Command::new(cargo)
        .args(["tree", "--offline", "-e", "normal", "--all-features", "--prefix", "none", "--format", "{p}", "-p", package])
        .current_dir(repo_root())
        .output()
        .expect("cargo tree runs");
    assert!(output.status.success(), "cargo tree -p {package}: {}", String::from_utf8_lossy(&output.stderr));
    let listed = String::from_utf8_lossy(&output.stdout).into_owned();
    listed.lines().filter_map(|line| line.split_whitespace().next().map(str::to_owned)).collect()
}

#[test]
fn the_types_crate_links_no_io_crate() {
    let linked = linked_crates("flotilla-types");
    assert!(linked.iter().any(|name| name == "serde"), "the tree was read: {linked:?}");
    let io: Vec<&String> =
        linked.iter().filter(|name| IO_CRATES.iter().any(|io| name.as_str() == *io || name.starts_with(io))).collect();
    assert!(io.is_empty(), "flotilla-types links I/O crates: {io:?}");
    let cli = linked_crates("flotilla-cli");
    assert!(cli.iter().any(|name| name == "flotilla-types"), "the CLI reads the task model's own types");
    assert!(!cli.iter().any(|name| name == "flotilla-queue" || name == "redis"), "the CLI links no queue: {cli:?}");
}
