#!/usr/bin/env bash
# BullMQ baseline: one throughput run and one latency run of the shared BullMQ
# benchmark (shared/bench/bullmq/bench.js) against a Redis already listening on
# 127.0.0.1:PORT.
#
#   scripts/bullmq-baseline.sh PORT [COPY_DIR]
#
# COPY_DIR (default /var/tmp/bullmq-bench) is a writable copy of the benchmark;
# it is made from ${FLOTILLA_BULLMQ_SRC:-<repo>/../shared/bench/bullmq} when
# missing, and `npm install` runs there when node_modules is missing.
#
# stdout: exactly two lines, the raw JSON lines bench.js prints, throughput
# first, then latency. Everything else (npm, node warnings) goes to stderr.
# Exit status is non-zero, with one line on stderr, on any failure.
set -euo pipefail

die() { printf 'bullmq-baseline: %s\n' "$*" >&2; exit 1; }

[ $# -ge 1 ] || die "usage: $0 PORT [COPY_DIR]"
PORT=$1
DIR=${2:-/var/tmp/bullmq-bench}
[[ $PORT =~ ^[0-9]+$ ]] || die "PORT must be a number, got '$PORT'"
command -v node >/dev/null 2>&1 || die "node not found on PATH (install Node.js >= 18 to run the BullMQ baseline)"

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SRC=${FLOTILLA_BULLMQ_SRC:-$REPO/../shared/bench/bullmq}

# Keep our stdout for the two result lines only.
exec 3>&1 1>&2

if [ ! -f "$DIR/bench.js" ]; then
  [ -f "$SRC/bench.js" ] || die "benchmark source not found: $SRC/bench.js (set FLOTILLA_BULLMQ_SRC)"
  mkdir -p "$(dirname "$DIR")"
  tmp=$(mktemp -d "$DIR.tmp.XXXXXX")
  cp -R "$SRC/." "$tmp/"
  chmod -R u+w "$tmp" # the source may be read-only
  rm -rf "$DIR"
  mv "$tmp" "$DIR"
fi

if [ ! -d "$DIR/node_modules" ]; then
  command -v npm >/dev/null 2>&1 || die "npm not found on PATH (needed once to install bullmq in $DIR)"
  (cd "$DIR" && npm install --no-audit --no-fund) || die "npm install failed in $DIR"
fi

# Fail fast with a clear line if nothing listens on the port (bench.js would
# otherwise retry the connection until its own timeout).
if ! (exec 4<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
  die "no Redis listening on 127.0.0.1:$PORT"
fi

# Run bench.js and print its single JSON result line on the saved stdout.
run_bench() {
  local mode=$1 out line
  shift
  out=$(cd "$DIR" && node bench.js "$mode" --port "$PORT" "$@") || die "bench.js $mode failed (exit $?)"
  line=$(printf '%s\n' "$out" | grep -E '^\{.*"mode":"'"$mode"'"' | tail -n 1) || true
  [ -n "$line" ] || die "bench.js $mode printed no JSON result line"
  # pass through any other stdout as diagnostics
  printf '%s\n' "$out" | grep -vxF -- "$line" || true
  printf '%s\n' "$line" >&3
}

run_bench throughput --n 20000 --batch 1000 --procs 1 --concurrency 50
run_bench latency --n 2000 --rate 500 --concurrency 50
