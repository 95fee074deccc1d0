#!/usr/bin/env bash
# Single-task HTTP enqueue, with and without a tenant's limits: a release
# `flotilla-api` against a fresh `redis-server` (no persistence), `wrk` with
# 64 connections posting one no-op task per request for 10 s after a 2 s
# warm-up, the two modes alternating for ROUNDS rounds. "without" gives the
# tenant only a `max_queued` no run can reach; "with" adds a submit rate and
# daily tokens set high enough never to refuse, so every request pays for
# the checks and none is refused.
#
#   scripts/enqueue-bench.sh [ROUNDS]     (default 3)
#
# Needs `target/release/flotilla-api` (`cargo build --release -p flotilla-api
# --bin flotilla-api`), `redis-server` and `wrk` (Debian's `wrk`). Prints a
# line per run and the medians; only loopback is used.
set -euo pipefail

die() { printf 'enqueue-bench: %s\n' "$*" >&2; exit 1; }

ROUNDS=${1:-3}
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive number, not '$ROUNDS'"
cd "$(dirname "$0")/.."
API=target/release/flotilla-api
[ -x "$API" ] || die "$API is missing: cargo build --release -p flotilla-api --bin flotilla-api"
command -v wrk >/dev/null || die "wrk is not installed: apt-get install wrk"
command -v redis-server >/dev/null || die "redis-server is not installed"

KEY=flt_enqueuebenchenqueuebenchenqueue01
REDIS_PORT=${ENQUEUE_BENCH_REDIS_PORT:-6393}
API_ADDR=127.0.0.1:${ENQUEUE_BENCH_API_PORT:-18090}
WORK=$(mktemp -d)
trap 'redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT

cat > "$WORK/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '{"prompt": "no-op", "pipeline": "scripted", "actions": []}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $KEY"
EOF
printf '[tenants.acme]\nmax_queued = 100000000\n' > "$WORK/without.toml"
printf '[tenants.acme]\nmax_queued = 100000000\nrate = { per_second = 1000000, burst = 1000000 }\nmax_tokens_per_day = 1000000000\n' > "$WORK/with.toml"

# One run of one mode; prints "<mode> <requests/s> <p50 ms> <p99 ms> <non-2xx>".
run() {
  local mode=$1 api out
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || true
  redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes --logfile "$WORK/redis.log"
  for _ in $(seq 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
  FLOTILLA_REDIS_URL="redis://127.0.0.1:$REDIS_PORT" FLOTILLA_API_ADDR="$API_ADDR" FLOTILLA_CONFIG="$WORK/$mode.toml" \
    FLOTILLA_API_KEYS="$KEY=acme" RUST_LOG=warn "$API" > "$WORK/api-$mode.log" 2>&1 &
  api=$!
  for _ in $(seq 100); do curl -s -o /dev/null "http://$API_ADDR/healthz" && break; sleep 0.1; done
  kill -0 "$api" 2>/dev/null || die "the API did not start: $(tail -1 "$WORK/api-$mode.log")"
  wrk -t2 -c64 -d2s -s "$WORK/post.lua" "http://$API_ADDR/v1/tasks" >/dev/null
  out=$(wrk -t2 -c64 -d10s --latency -s "$WORK/post.lua" "http://$API_ADDR/v1/tasks")
  kill "$api"; wait "$api" 2>/dev/null || true
  awk -v mode="$mode" '
    /Requests\/sec/ { rps = $2 }
    $1 == "50%" { p50 = $2 }
    $1 == "99%" { p99 = $2 }
    /Non-2xx/ { bad = $NF }
    function ms(t) { if (t ~ /us$/) return t / 1000; if (t ~ /ms$/) return t + 0; if (t ~ /s$/) return t * 1000; return t }
    END { printf "%s %.0f %.2f %.2f %d\n", mode, rps, ms(p50), ms(p99), bad + 0 }' <<< "$out"
}

for _ in $(seq "$ROUNDS"); do
  run without
  run with
done | tee "$WORK/runs.txt"
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
without=$(awk '$1 == "without" { print $2 }' "$WORK/runs.txt" | median)
with=$(awk '$1 == "with" { print $2 }' "$WORK/runs.txt" | median)
awk -v wo="$without" -v w="$with" 'BEGIN { printf "median requests/s: without %.0f, with %.0f, ratio %.3f\n", wo, w, w / wo }'
