//! The Python interpreter of the virtual environment `scripts/setup.sh` fills
//! with the packages tests verify the fleet with (independent verifiers and
//! official SDKs): `<target dir>/venv`.

use std::path::PathBuf;

/// The venv's `python`, beside the build's `debug/` directory.
pub fn venv_python() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe.ancestors().find(|dir| dir.join("debug").is_dir() && dir.join("venv").is_dir());
    let python = target.map(|dir| dir.join("venv/bin/python"));
    match python {
        Some(path) if path.exists() => path,
        _ => panic!("no Python venv under the target dir: run `bash scripts/setup.sh` first"),
    }
}

/// The directory `scripts/setup.sh` installs the npm SDKs tests drive the
/// fleet with into (`<target dir>/node-sdk`, with its `node_modules`).
pub fn node_sdk_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let target = exe.ancestors().find(|dir| dir.join("debug").is_dir() && dir.join("node-sdk/node_modules").is_dir());
    match target {
        Some(dir) => dir.join("node-sdk"),
        None => panic!("no node-sdk under the target dir: run `bash scripts/setup.sh` first"),
    }
}
