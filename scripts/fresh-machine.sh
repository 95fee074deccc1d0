#!/usr/bin/env bash
# Runs one of the README's commands on a fresh Debian 12 system that has only
# the Rust toolchain, and keeps its output with a time on every line: the
# set-up a newcomer sees. The system is a minimal Debian root (mmdebstrap
# --variant=minbase) with this machine's stable Rust toolchain copied in and a
# clone of this repository's HEAD; the command runs in it as root, in its own
# mount, IPC and UTS namespaces (bubblewrap), on the host's network, devices
# and processes. Nothing of the host's packages, caches or build is visible to it.
#
#   bash scripts/fresh-machine.sh DIR [COMMAND...]   # default: bash scripts/demo.sh
#
# DIR is made (it must not exist yet; needs about 12 GiB). The timed log is
# DIR/setup.log; the last line says the longest gap between two lines.
# Needs root, mmdebstrap and bwrap on the host.
set -euo pipefail

die() { printf 'fresh-machine: %s\n' "$*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: bash scripts/fresh-machine.sh DIR [COMMAND...]"
dir=$1
shift
[ $# -gt 0 ] || set -- bash scripts/demo.sh
[ "$(id -u)" -eq 0 ] || die "needs root (it builds a Debian root and runs it)"
[ ! -e "$dir" ] || die "$dir exists already: name a new directory"
command -v mmdebstrap >/dev/null || die "mmdebstrap is not installed (apt-get install mmdebstrap)"
command -v bwrap >/dev/null || die "bwrap is not installed (apt-get install bubblewrap)"
toolchain=$(rustup toolchain list | awk '/\(default\)|default/ {print $1; exit}')
[ -n "$toolchain" ] || die "no default Rust toolchain (rustup toolchain list)"
repo=$(cd "$(dirname "$0")/.." && pwd)

root="$dir/root"
mkdir -p "$dir"
printf 'fresh-machine: making a minimal Debian 12 root in %s\n' "$root" >&2
mmdebstrap --quiet --variant=minbase bookworm "$root" >/dev/null
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_home=${CARGO_HOME:-$HOME/.cargo}
mkdir -p "$root/root/.rustup/toolchains" "$root/root/.cargo/bin"
cp -a "$rustup_home/toolchains/$toolchain" "$root/root/.rustup/toolchains/"
printf 'version = "12"\ndefault_toolchain = "%s"\nprofile = "default"\n' "$toolchain" >"$root/root/.rustup/settings.toml"
cp -a "$cargo_home/bin/rustup" "$root/root/.cargo/bin/"
for proxy in cargo rustc rustdoc rustfmt cargo-fmt cargo-clippy clippy-driver; do
  ln -s rustup "$root/root/.cargo/bin/$proxy"
done
git clone --quiet "$repo" "$root/root/flotilla"
# The machine's own certificate authorities (a network that inspects
# HTTPS has one), as an image of this machine carries them: Debian's
# ca-certificates, once set-up installs it, takes them into its bundle.
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
fi

printf 'fresh-machine: running `%s` in it; the timed log is %s\n' "$*" "$dir/setup.log" >&2
set +e
# The host's /proc whole (and so its pid namespace): the sandboxes' jail
# mounts a /proc of its own, which a user namespace may do only where no
# part of /proc is hidden under another mount.
bwrap --bind "$root" / --dev-bind /dev /dev --bind /proc /proc --bind /sys /sys --perms 1777 --tmpfs /tmp \
  --unshare-ipc --unshare-uts --hostname fresh --die-with-parent \
  --setenv HOME /root --setenv PATH /root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --chdir /root/flotilla "$@" 2>&1 |
  python3 -u -c '
import sys, time
start = last = time.monotonic()
longest = (0.0, "")
for line in sys.stdin:
    now = time.monotonic()
    if now - last > longest[0]:
        longest = (now - last, line.rstrip())
    last = now
    print("%s +%7.1fs  %s" % (time.strftime("%H:%M:%S"), now - start, line.rstrip()), flush=True)
print("fresh-machine: %.0f s in all; the longest gap between two lines: %.1f s, before: %s"
      % (time.monotonic() - start, longest[0], longest[1][:100]), flush=True)
' | tee "$dir/setup.log"
status=${PIPESTATUS[0]}
exit "$status"
