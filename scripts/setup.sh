#!/usr/bin/env bash
# Install what Flotilla's build, tests and benchmarks need on a Debian 12 machine.
#
#   bash scripts/setup.sh
#
# Idempotent: installs only what is missing, runs `apt-get update` at most once
# (and only when an apt package is missing), prints one line per install and
# nothing when everything is already present. Needs root (or sudo).
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo)
  else
    log "not root and no sudo; installs will likely fail"
  fi
fi

APT_UPDATED=0
apt_update_once() {
  if [ "$APT_UPDATED" -eq 0 ]; then
    "${SUDO[@]}" apt-get update -qq >/dev/null
    APT_UPDATED=1
  fi
}

# Command -> Debian package providing it. Add new tools here.
# (Desktop tools for the computer-use worker, e.g. Xvfb -> xvfb and
# xdotool -> xdotool, belong in this table once the worker needs them.)
APT_TOOLS=(
  "redis-server:redis-server"
  "redis-cli:redis-tools"
)

ensure_apt_packages() {
  local entry cmd pkg missing=()
  for entry in "${APT_TOOLS[@]}"; do
    cmd=${entry%%:*}
    pkg=${entry#*:}
    if ! command -v "$cmd" >/dev/null 2>&1; then
      # several commands may come from one package: list it once
      case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  apt_update_once
  for pkg in "${missing[@]}"; do
    log "installing $pkg (apt)"
  done
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ensure_nextest() {
  if cargo nextest --version >/dev/null 2>&1; then
    return 0
  fi
  log "installing cargo-nextest (cargo install)"
  cargo install cargo-nextest --locked --quiet
}

main() {
  ensure_apt_packages
  ensure_nextest
}

# Run only when executed, so the functions can be sourced on their own.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
