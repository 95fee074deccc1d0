//! Two clones of the repository build apart: nothing in the repository sends
//! builds to a directory outside it, so each clone compiles into its own
//! `target/` (or `CARGO_TARGET_DIR`, when a user sets one) and two clones
//! building and testing at once never share a build directory, a lock or
//! each other's errors.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().expect("the repository root")
}

/// The repository's tracked files, as a fresh clone has them.
fn tracked_files(repo: &Path) -> Vec<PathBuf> {
    let out = Command::new("git").args(["ls-files", "-z"]).current_dir(repo).output().expect("git runs");
    assert!(out.status.success(), "git ls-files: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty()).map(|p| PathBuf::from(String::from_utf8_lossy(p).as_ref())).collect()
}

/// Copies the tracked files of `repo` to `to`.
fn clone_into(repo: &Path, files: &[PathBuf], to: &Path) {
    for file in files {
        let from = repo.join(file);
        if !from.is_file() {
            continue;
        }
        let dest = to.join(file);
        std::fs::create_dir_all(dest.parent().expect("a parent")).expect("mkdir");
        std::fs::copy(&from, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", from.display()));
    }
}

/// `cargo metadata` in `dir`, without a target directory set by the environment.
fn metadata(dir: &Path) -> std::process::Child {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--no-deps", "--offline"])
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET_DIR")
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cargo runs")
}

fn target_directory(child: std::process::Child, dir: &Path) -> PathBuf {
    let out = child.wait_with_output().expect("cargo metadata ends");
    assert!(out.status.success(), "cargo metadata in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    PathBuf::from(json["target_directory"].as_str().expect("target_directory"))
}

#[test]
fn the_repository_sets_no_shared_target_directory() {
    let repo = repo_root();
    for name in ["config.toml", "config"] {
        let path = repo.join(".cargo").join(name);
        let Ok(text) = std::fs::read_to_string(&path) else { continue };
        let config: toml::Table = text.parse().unwrap_or_else(|e| panic!("{} does not parse: {e}", path.display()));
        let target_dir = config.get("build").and_then(|b| b.get("target-dir"));
        assert!(target_dir.is_none(), "{} sends every clone's build to {target_dir:?}", path.display());
    }
}

#[test]
fn two_clones_build_into_their_own_target_directories() {
    let repo = repo_root();
    let files = tracked_files(&repo);
    assert!(files.iter().any(|f| f == Path::new("Cargo.toml")), "the root manifest is tracked");
    let base = std::env::temp_dir().join(format!("flotilla-clones-{}", ulid::Ulid::new()));
    let clones = [base.join("a"), base.join("b")];
    for clone in &clones {
        clone_into(&repo, &files, clone);
    }
    let running: Vec<_> = clones.iter().map(|c| metadata(c)).collect();
    let targets: Vec<PathBuf> = running.into_iter().zip(&clones).map(|(child, dir)| target_directory(child, dir)).collect();
    let _ = std::fs::remove_dir_all(&base);
    for (target, clone) in targets.iter().zip(&clones) {
        assert_eq!(target, &clone.join("target"), "a clone builds into its own target/");
    }
    assert_ne!(targets[0], targets[1]);
}
