#!/usr/bin/env bash
# The local fleet, end to end: Redis (with AOF), the API, two workers; then a
# small batch of scripted tasks is submitted and their progress shown live.
#
#   bash scripts/demo.sh            # FLOTILLA_DEMO_TASKS=8 by default
#
# Everything runs on loopback and stops when the demo ends (or on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
echo "building…" >&2
cargo build --workspace --bins --quiet
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
api_port=$(free_port)
work=$(mktemp -d -t flotilla-demo-XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM

redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --appendonly yes --appendfsync everysec \
  --save "" --maxmemory-policy noeviction >"$work/redis.log" 2>&1 &
pids+=($!)

export FLOTILLA_REDIS_URL="redis://127.0.0.1:$redis_port"
export FLOTILLA_API_ADDR="127.0.0.1:$api_port"
export FLOTILLA_API_KEYS="demo-key-0001=demo"
export FLOTILLA_API_URL="http://127.0.0.1:$api_port"
export FLOTILLA_API_KEY="demo-key-0001"
export RUST_LOG="${RUST_LOG:-warn}"

for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$bin/flotilla-api" 2>"$work/api.log" &
pids+=($!)
for w in 1 2; do
  FLOTILLA_WORKER_ID="demo-worker-$w" FLOTILLA_WORKER_CONCURRENCY=3 "$bin/flotilla-worker" 2>"$work/worker-$w.log" &
  pids+=($!)
done
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$api_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
echo "fleet up: redis 127.0.0.1:$redis_port, api $FLOTILLA_API_URL, 2 workers × 3 slots" >&2

batch_file="$work/batch.jsonl"
for i in $(seq "${FLOTILLA_DEMO_TASKS:-8}"); do
  steps=$(( 2 + i % 4 ))
  ms=$(( 300 + (i * 137) % 500 ))
  priority=normal
  if [ $(( i % 4 )) -eq 0 ]; then priority=high; fi
  python3 -c 'import json,sys; n,ms,steps,p=sys.argv[1:]; print(json.dumps({"prompt": f"demo task {n}: {steps} timed steps", "priority": p, "actions": [{"type": "wait", "ms": int(ms)}] * int(steps)}))' \
    "$i" "$ms" "$steps" "$priority" >>"$batch_file"
done
accepted=$("$bin/flotilla" --json batch "$batch_file" --defaults '{"pipeline": "scripted"}' --no-wait)
batch_id=$(printf '%s' "$accepted" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
mapfile -t ids < <(printf '%s' "$accepted" | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["task_ids"]))')
echo "submitted batch $batch_id with ${#ids[@]} tasks; following them live" >&2
"$bin/flotilla" watch "${ids[@]}"
echo >&2
"$bin/flotilla" tasks --batch "$batch_id" --limit 20
