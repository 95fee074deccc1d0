#!/usr/bin/env bash
# The whole test suite: installs what is missing, checks formatting and lints
# (Rust, and the Redis scripts' Lua: stylua, luacheck), checks the dependency
# tree (licenses, bans, advisories: scripts/deny.sh),
# builds the binaries the tests run as processes, then runs every test of the
# workspace in parallel. The benchmarks (`benches/`, package flotilla-benches)
# are linted with the rest but neither built nor run here: build them with
# `cargo build --release -p flotilla-benches`, test them with
# `cargo nextest run -p flotilla-benches`.
#
#   bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'test: %s\n' "$*" >&2; }
# shellcheck source=lib/talking.sh
. scripts/lib/talking.sh

bash scripts/setup.sh
cargo fmt --all --check
stylua --check .
luacheck --quiet --no-color .
log "linting (cargo clippy)"
talking "cargo clippy" cargo clippy --workspace --all-targets --quiet -- -D warnings
bash scripts/deny.sh
# The shipped binaries alone, without the features tests turn on: they
# reach Redis only through the queue's methods (`Queue::redis`/`keys` exist
# for tests and benchmarks only, behind flotilla-queue's `testing` feature).
talking "cargo check" cargo check --quiet -p flotilla-api -p flotilla-worker -p flotilla-cli -p flotilla-sandboxd --lib --bin flotilla-api --bin flotilla-worker --bin flotilla --bin flotilla-sandboxd
log "building the binaries the tests start"
talking "cargo build" cargo build --workspace --exclude flotilla-benches --bins --quiet
profile=default
if [ "${CI:-}" = "true" ]; then profile=ci; fi
cargo nextest run --workspace --exclude flotilla-benches --profile "$profile" "$@"
# nextest runs no doctests; the worker's hold the compile_fail proof that a
# pipeline's task handle cannot end its task.
cargo test --doc -p flotilla-worker --quiet
