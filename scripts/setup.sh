#!/usr/bin/env bash
# Install what Flotilla's build, tests and benchmarks need on a Debian 12 machine.
#
#   bash scripts/setup.sh
#
# Idempotent: installs only what is missing, runs `apt-get update` at most once
# (and only when an apt package is missing), prints one line per install and
# nothing when everything is already present; a long install says every few
# seconds that it goes on (`talking`). Needs root (or sudo).
set -euo pipefail

log() { printf 'setup: %s\n' "$*" >&2; }

# shellcheck source=lib/talking.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/talking.sh"

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
    log "reading Debian's package lists (apt-get update)"
    talking "apt-get update" "${SUDO[@]}" apt-get update
    APT_UPDATED=1
  fi
}

# Command -> Debian package providing it. Add new tools here.
# What a machine with only the Rust toolchain lacks to build and run the
# fleet: a C compiler and linker (for cargo and the crates that build C),
# and the process and HTTP tools the scripts and tests use.
APT_TOOLS=(
  "cc:gcc"
  "ps:procps"
  "curl:curl"
  "python3:python3"
  "redis-server:redis-server"
  "redis-cli:redis-tools"
  # The linter of the Redis scripts (`lua/*.lua`, .luacheckrc).
  "luacheck:lua-check"
)

# What a host of local desktops runs: a worker with
# FLOTILLA_SANDBOX_PROVIDER=local or `flotilla-sandboxd`. The sandbox host's
# image (deploy/Dockerfile, target `sandboxd`) installs every package of
# this list and of DESKTOP_APT_PACKAGES; tests/tests/it/deploy.rs checks it.
# The desktop tools are what the local sandbox provider runs per sandbox;
# scrot is how the E2B provider captures a screen (tested on local desktops).
DESKTOP_APT_TOOLS=(
  "Xvfb:xvfb"
  "xdotool:xdotool"
  "scrot:scrot"
  "openbox:openbox"
  "xterm:xterm"
  "bwrap:bubblewrap"
  # The local sandbox's jail: namespaces (util-linux), egress through a
  # user-mode network stack, its routes, the in-sandbox gateway forwarder,
  # and X tools the isolation tests drive displays with.
  "unshare:util-linux"
  "nsenter:util-linux"
  "prlimit:util-linux"
  # Every process of a local desktop runs under `setpriv --pdeathsig KILL`.
  "setpriv:util-linux"
  # A process envd starts on a terminal runs under `setsid --ctty`.
  "setsid:util-linux"
  "slirp4netns:slirp4netns"
  "ip:iproute2"
  "socat:socat"
  "xauth:xauth"
  "xwd:x11-apps"
  # Live views: a VNC server attached to a task's display on the worker.
  "x11vnc:x11vnc"
  # What E2B's desktop template has and the Desktop SDK runs in a sandbox
  # of flotilla-sandboxd: its session (XFCE, with a D-Bus session bus), the
  # screen size (xrandr), the display check (xdpyinfo) and the stream's
  # port check (netstat), and noVNC's WebSocket proxy.
  "startxfce4:xfce4-session"
  "xfwm4:xfwm4"
  "xfdesktop:xfdesktop4"
  "dbus-launch:dbus-x11"
  "xrandr:x11-xserver-utils"
  "xdpyinfo:x11-utils"
  "netstat:net-tools"
  "websockify:python3-websockify"
  # The built-in sandbox templates' apps (shared/config/src/templates_builtin.rs):
  # `browser` (Chromium, Firefox ESR beside it) and `office`
  # (LibreOffice Calc and Writer, a file manager, a text editor); the
  # worker opens apps in a sandbox with xdotool. (The dashboard test drives
  # Chromium too, headless, over its DevTools pipe.)
  "chromium:chromium"
  "firefox-esr:firefox-esr"
  "soffice:libreoffice-calc"
  "pcmanfm:pcmanfm"
  "mousepad:mousepad"
)

# Packages that install no command, checked with dpkg.
APT_PACKAGES=(
  # The certificate authorities cargo and the SDK installs fetch over HTTPS with.
  "ca-certificates"
  # The C library's headers and start files, which linking any Rust binary needs.
  "libc6-dev"
)

# The same for desktop hosts (see DESKTOP_APT_TOOLS).
DESKTOP_APT_PACKAGES=(
  # The sandbox terminal's font (`xterm -fa Monospace`).
  "fonts-dejavu-core"
  # The noVNC page the API serves for live views (/usr/share/novnc).
  "novnc"
  # The `office` template's writer (Calc brings soffice above); not the
  # whole `libreoffice` suite.
  "libreoffice-calc"
  "libreoffice-writer"
)

# The Debian packages the templates of the config file named by
# FLOTILLA_CONFIG list (`[templates.<name>] packages = [...]`), one a line.
configured_template_packages() {
  [ -n "${FLOTILLA_CONFIG:-}" ] && [ -f "$FLOTILLA_CONFIG" ] || return 0
  command -v python3 >/dev/null 2>&1 || return 0
  python3 - "$FLOTILLA_CONFIG" <<'PY'
import sys, tomllib
with open(sys.argv[1], "rb") as f:
    config = tomllib.load(f)
for template in (config.get("templates") or {}).values():
    for package in template.get("packages") or []:
        print(package)
PY
}

ensure_apt_packages() {
  local entry cmd pkg missing=()
  while IFS= read -r pkg; do
    [ -n "$pkg" ] && APT_PACKAGES+=("$pkg")
  done < <(configured_template_packages)
  for entry in "${APT_TOOLS[@]}" "${DESKTOP_APT_TOOLS[@]}"; do
    cmd=${entry%%:*}
    pkg=${entry#*:}
    if ! command -v "$cmd" >/dev/null 2>&1; then
      # several commands may come from one package: list it once
      case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
    fi
  done
  for pkg in "${APT_PACKAGES[@]}" "${DESKTOP_APT_PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
      case " ${missing[*]-} " in *" $pkg "*) ;; *) missing+=("$pkg") ;; esac
    fi
  done
  [ "${#missing[@]}" -eq 0 ] && return 0
  apt_update_once
  for pkg in "${missing[@]}"; do
    log "installing $pkg (apt)"
  done
  talking "apt-get install" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
}

ensure_nextest() {
  if cargo nextest --version >/dev/null 2>&1; then
    return 0
  fi
  log "installing cargo-nextest (cargo install)"
  talking "cargo-nextest" cargo install cargo-nextest --locked
}

# Dependency checks in the test command (scripts/deny.sh). Pinned; built from
# source: about 4 minutes of CPU on 2 cores (longer when the machine is busy).
CARGO_DENY_VERSION=0.20.2
ensure_cargo_deny() {
  if cargo deny --version >/dev/null 2>&1; then
    return 0
  fi
  log "installing cargo-deny $CARGO_DENY_VERSION (cargo install, about 4 minutes of CPU)"
  talking "cargo-deny" cargo install "cargo-deny@$CARGO_DENY_VERSION" --locked
}

# The formatter of the Redis scripts (`lua/*.lua`, stylua.toml), checked in
# the test command. Pinned, so every machine formats alike.
STYLUA_VERSION=2.6.0
ensure_stylua() {
  if command -v stylua >/dev/null 2>&1; then
    return 0
  fi
  log "installing stylua $STYLUA_VERSION (cargo install, a few minutes on 2 cores)"
  talking "stylua" cargo install "stylua@$STYLUA_VERSION" --locked
}

# The S3-protocol server the blob store tests and screenshot_bench run
# against. Pinned: 0.15 and later need a newer rustc than this toolchain.
S3S_FS_VERSION=0.14.1
ensure_s3s_fs() {
  if command -v s3s-fs >/dev/null 2>&1; then
    return 0
  fi
  log "installing s3s-fs $S3S_FS_VERSION (cargo install, about 3 minutes on 2 cores)"
  talking "s3s-fs" cargo install "s3s-fs@$S3S_FS_VERSION" --locked --features binary
}

# The real `claude` CLI the claude-code pipeline runs inside sandboxes (and
# its end-to-end tests run against a local fake of the Anthropic API). A
# global npm install puts it on the PATH every sandbox sees.
ensure_claude_cli() {
  if command -v claude >/dev/null 2>&1; then
    return 0
  fi
  if ! command -v npm >/dev/null 2>&1; then
    apt_update_once
    log "installing nodejs and npm (apt)"
    talking "apt-get install" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends nodejs npm
  fi
  log "installing @anthropic-ai/claude-code (npm install -g)"
  talking "npm install" "${SUDO[@]}" npm install -g --no-audit --no-fund @anthropic-ai/claude-code
}

# Python packages some tests drive the fleet with (independent verifiers and
# official SDKs), in a virtual environment under this checkout's target dir, so
# clones never share one. Add new packages here; they are installed when the
# list changes.
PY_PACKAGES=(
  anthropic
  openai
  google-genai
  standardwebhooks # verifies webhook signatures in tests/tests/it/webhooks.rs
  schemathesis==4.32.5 # fuzzes the API against /openapi.json in tests/tests/it/schemathesis.rs
  e2b-desktop # the official E2B SDKs, checking the E2B stand-in in tests/tests/it/sdk_checks.rs
  # sdk/python: its dependencies, its model generator (sdk/generate.sh), its
  # unit tests, and the progress bar its README's batch example shows.
  httpx
  pydantic
  datamodel-code-generator==0.89.0
  pytest
  tqdm
  mcp==2.3.0 # the official MCP client, driving the MCP server in tests/tests/it/mcp.rs
)
venv_dir() {
  local target
  target=$(cargo metadata --format-version 1 --no-deps 2>/dev/null |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
  printf '%s/venv' "$target"
}
ensure_python_packages() {
  [ "${#PY_PACKAGES[@]}" -eq 0 ] && return 0
  local venv stamp wanted
  venv=$(venv_dir)
  stamp="$venv/.flotilla-packages"
  wanted=$(printf '%s\n' "${PY_PACKAGES[@]}")
  if [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
    return 0
  fi
  if ! /usr/bin/python3 -m venv --help >/dev/null 2>&1; then
    apt_update_once
    log "installing python3-venv (apt)"
    talking "apt-get install" "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends python3 python3-venv
  fi
  log "installing ${PY_PACKAGES[*]} (pip, into $venv)"
  /usr/bin/python3 -m venv "$venv"
  talking "pip install" "$venv/bin/python" -m pip install --disable-pip-version-check "${PY_PACKAGES[@]}"
  printf '%s' "$wanted" >"$stamp"
}

# The official E2B SDKs for JavaScript (npm `e2b`, `@e2b/desktop`), which
# check flotilla-sandboxd in tests/tests/it/sandboxd.rs, installed beside the
# venv under this checkout's target dir. Reinstalled when the list changes.
# sdk/typescript: its compiler and type generator (pinned, so generation is
# deterministic: sdk/generate.sh) and its one dependency, for the tests that
# build it and run its README against a fleet (tests/tests/it/sdk_typescript.rs).
NPM_PACKAGES=(e2b @e2b/desktop typescript@5.9.3 openapi-typescript@7.13.0 standardwebhooks@1.1.1)
ensure_npm_packages() {
  local dir stamp wanted
  dir="$(dirname "$(venv_dir)")/node-sdk"
  stamp="$dir/.flotilla-packages"
  wanted=$(printf '%s\n' "${NPM_PACKAGES[@]}")
  if [ -d "$dir/node_modules" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$wanted" ]; then
    return 0
  fi
  log "installing ${NPM_PACKAGES[*]} (npm, into $dir)"
  mkdir -p "$dir"
  talking "npm install" npm install --prefix "$dir" --no-audit --no-fund "${NPM_PACKAGES[@]}"
  printf '%s' "$wanted" >"$stamp"
}

# slirp4netns opens /dev/net/tun as the worker's user. Debian's udev rules
# make it mode 0666 (a tap device is only made inside a namespace the caller
# owns); some container runtimes create it 0600, so a worker that is not root
# could not give its sandboxes egress. Made as Debian has it, once.
ensure_tun_device() {
  local tun=/dev/net/tun
  [ -c "$tun" ] || return 0
  if [ "$(stat -c %a "$tun")" != "666" ]; then
    log "making $tun usable by unprivileged users (mode 0666, as Debian's udev does)"
    "${SUDO[@]}" chmod 0666 "$tun"
  fi
}

# A worker that runs as root maps each sandbox onto one uid and gid of a
# subordinate range of root's (sandbox/desktop/src/identity.rs), so no
# sandbox process is ever host uid 0. The range is set once, far above the
# ids people and packages use; an existing range for root is kept.
SUBORDINATE_RANGE="1000000000:65536"
ensure_subordinate_ids() {
  local file
  for file in /etc/subuid /etc/subgid; do
    if ! grep -Eq '^(root|0):[0-9]+:[1-9][0-9]*$' "$file" 2>/dev/null; then
      log "giving root the subordinate id range $SUBORDINATE_RANGE in $file (sandboxes of a root worker)"
      printf 'root:%s\n' "$SUBORDINATE_RANGE" | "${SUDO[@]}" tee -a "$file" >/dev/null
    fi
  done
}

# `--demo`: only what scripts/demo.sh runs (the Debian packages and s3s-fs);
# the test tools, the Python packages and the Claude Code CLI are left out.
main() {
  ensure_apt_packages
  ensure_tun_device
  ensure_subordinate_ids
  ensure_s3s_fs
  [ "${1:-}" = "--demo" ] && return 0
  ensure_python_packages
  ensure_nextest
  ensure_stylua
  ensure_cargo_deny
  ensure_claude_cli
  ensure_npm_packages
}

# Run only when executed, so the functions can be sourced on their own.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
