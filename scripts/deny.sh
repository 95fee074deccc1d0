#!/usr/bin/env bash
# Dependency checks with cargo-deny (deny.toml): licenses, bans and sources
# always; advisories against the RustSec database.
#
#   bash scripts/deny.sh
#
# The advisory database is a git repository on GitHub. When it cannot be
# fetched, a copy already in ~/.cargo/advisory-dbs (from an earlier run, or
# restored by CI from its cache) is used as it is. With neither, the
# advisories check cannot run: this says so in a banner on stderr, every
# time, and never reports it as passed.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo deny --log-level error check licenses bans sources

db_dir="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
if cargo deny --log-level error fetch db 2>/dev/null; then
  cargo deny --log-level error check advisories
elif find "$db_dir" -mindepth 2 -maxdepth 2 -name crates 2>/dev/null | grep -q .; then
  echo "deny: the advisory database could not be fetched; checking against the cached copy in $db_dir" >&2
  cargo deny --log-level error check --disable-fetch advisories
else
  cat >&2 <<BANNER
################################################################################
# ADVISORIES NOT CHECKED
# The RustSec advisory database could not be fetched from GitHub and no cached
# copy is in $db_dir, so no dependency was checked for known vulnerabilities.
# Licenses, bans and sources were checked. Run this where GitHub is reachable
# (or restore $db_dir) to check advisories.
################################################################################
BANNER
fi
