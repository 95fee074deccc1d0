#!/usr/bin/env bash
# The local fleet, end to end: Redis (with AOF), an S3-compatible store
# (s3s-fs), the API, two workers with local desktop sandboxes (Xvfb, a window
# manager, a terminal; one kept warm per worker); then a small batch of
# scripted tasks is submitted — most type commands into a terminal, a few
# only wait, one waits for a person's approval — and their progress shown
# live, while `flotilla webhooks listen` prints the batch's signed webhook
# deliveries. Every screenshot is stored once in the local store; the demo
# ends by printing where to see them.
#
#   bash scripts/demo.sh            # FLOTILLA_DEMO_TASKS=8 by default
#   bash scripts/demo.sh --keep     # leave the fleet running, print how to use it
#   bash scripts/demo.sh --stop     # stop a kept fleet, by its recorded PIDs
#
# Everything runs on loopback. Without --keep it stops when the demo ends (or
# on Ctrl-C); with --keep it stays up, its PIDs recorded in
# FLOTILLA_DEMO_DIR/pids, until --stop. The stored screenshots stay in
# FLOTILLA_DEMO_DIR (default /tmp/flotilla-demo) until the next run.
# FLOTILLA_DEMO_BIN_DIR names a directory of binaries built already, in
# place of the build this script runs.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf 'demo: %s\n' "$*" >&2; }
# shellcheck source=lib/talking.sh
. scripts/lib/talking.sh

# descendants PID...: every process below these, from ps.
descendants() {
  ps -eo pid=,ppid= | awk -v roots="$*" '
    BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
    { parent[$1] = $2 }
    END { do { added = 0; for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; added = 1 } } while (added)
          for (p in keep) { root = 0; for (i = 1; i <= n; i++) if (p == r[i]) root = 1; if (!root) print p } }'
}

# wait_gone TENTHS PID...: waits up to TENTHS tenths of a second for these to end.
wait_gone() {
  local tenths=$1 pid alive
  shift
  for _ in $(seq "$tenths"); do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ "$alive" -eq 0 ] && return 0
    sleep 0.1
  done
}

demo_dir="${FLOTILLA_DEMO_DIR:-/tmp/flotilla-demo}"
pid_file="$demo_dir/pids"
keep=0
case "${1:-}" in
  "") ;;
  --keep) keep=1 ;;
  --stop)
    # Stops what a --keep run recorded: each process gets SIGTERM (workers
    # give their desktops back as they stop), then SIGKILL after 15 s.
    if [ ! -s "$pid_file" ]; then
      echo "demo: no kept fleet recorded in $pid_file" >&2
      exit 0
    fi
    mapfile -t recorded <"$pid_file"
    # Their children too (the desktops of tasks still running), which end
    # with their worker: waited for, and killed should one linger.
    mapfile -t family < <(descendants "${recorded[@]}")
    for pid in "${recorded[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait_gone 150 "${recorded[@]}"
    for pid in "${recorded[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait_gone 100 "${family[@]}"
    for pid in "${family[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    rm -f "$pid_file"
    [ -f "$demo_dir/work" ] && rm -rf "$(cat "$demo_dir/work")" "$demo_dir/work"
    echo "demo: stopped ${#recorded[@]} processes" >&2
    exit 0
    ;;
  *)
    echo "demo: unknown option $1 (use --keep or --stop)" >&2
    exit 2
    ;;
esac
if [ -s "$pid_file" ]; then
  echo "demo: a kept fleet is still running (its PIDs are in $pid_file): stop it with scripts/demo.sh --stop" >&2
  exit 1
fi

bash scripts/setup.sh --demo
if [ -n "${FLOTILLA_DEMO_BIN_DIR:-}" ]; then
  # Binaries built already (the test suite's own): no cargo run here.
  bin=$FLOTILLA_DEMO_BIN_DIR
else
  log "building the binaries (the first build takes several minutes on 2 cores)"
  talking "cargo build" cargo build --workspace --exclude flotilla-benches --bins
  bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
redis_port=$(free_port)
api_port=$(free_port)
s3_port=$(free_port)
sandboxd_port=$(free_port)
edge_port=$(free_port)
work=$(mktemp -d -t flotilla-demo-XXXXXX)
store="$demo_dir/s3"
rm -rf "$store"
mkdir -p "$store/flotilla-demo"
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

s3s-fs --host 127.0.0.1 --port "$s3_port" --access-key demo-access-key --secret-key demo-secret-key "$store" \
  >"$work/s3.log" 2>&1 &
pids+=($!)

export FLOTILLA_REDIS_URL="redis://127.0.0.1:$redis_port"
export FLOTILLA_API_ADDR="127.0.0.1:$api_port"
# API keys are flt_ and at least 32 random letters and digits: a fresh one per run.
demo_key="flt_$(head -c 96 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 43)"
export FLOTILLA_API_KEYS="$demo_key=demo"
# The demo tenant may name the built-in browser and office templates.
printf '[tenants.demo]\nsandbox_templates = ["browser", "office"]\n' >"$work/flotilla.toml"
export FLOTILLA_CONFIG="$work/flotilla.toml"
export FLOTILLA_API_URL="http://127.0.0.1:$api_port"
export FLOTILLA_API_KEY="$demo_key"
export RUST_LOG="${RUST_LOG:-warn}"
export FLOTILLA_S3_BUCKET="flotilla-demo"
export FLOTILLA_S3_ENDPOINT="http://127.0.0.1:$s3_port"
export AWS_ACCESS_KEY_ID="demo-access-key"
export AWS_SECRET_ACCESS_KEY="demo-secret-key"
export AWS_REGION="us-east-1"

for _ in $(seq 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$bin/flotilla-api" >"$work/api.log" 2>&1 &
pids+=($!)
# The sandbox host: the local desktops, over E2B's protocol, for the workers
# and the E2B SDKs. A desktop outlives the worker that made it.
sandboxd_key="e2b_$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
FLOTILLA_SANDBOXD_KEYS="$sandboxd_key" FLOTILLA_SANDBOXD_ADDR="127.0.0.1:$sandboxd_port" \
  FLOTILLA_SANDBOXD_EDGE_ADDR="127.0.0.1:$edge_port" FLOTILLA_SANDBOXD_ROOT="$demo_dir/sandboxd" FLOTILLA_SANDBOXD_POOL=1 \
  FLOTILLA_SANDBOXD_CAPACITY=10 "$bin/flotilla-sandboxd" >"$work/sandboxd.log" 2>&1 &
pids+=($!)
# The processes the tasks need, by the name of their log.
declare -A needed=([sandboxd]=$!)
for w in 1 2; do
  FLOTILLA_WORKER_ID="demo-worker-$w" FLOTILLA_WORKER_CONCURRENCY=3 FLOTILLA_SANDBOX_PROVIDER=local FLOTILLA_SANDBOX_WARM=1 \
    FLOTILLA_SANDBOXD_URL="http://127.0.0.1:$sandboxd_port" FLOTILLA_SANDBOXD_KEY="$sandboxd_key" FLOTILLA_DRAIN_DEADLINE_S=5 \
    "$bin/flotilla-worker" >"$work/worker-$w.log" 2>&1 &
  pids+=($!)
  needed[worker-$w]=$!
done
for _ in $(seq 100); do
  curl -fs "http://127.0.0.1:$api_port/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$s3_port/" && break
  sleep 0.1
done
for _ in $(seq 100); do
  curl -fs -o /dev/null "http://127.0.0.1:$sandboxd_port/health" && break
  sleep 0.1
done
echo "fleet up: redis 127.0.0.1:$redis_port, s3 127.0.0.1:$s3_port, api $FLOTILLA_API_URL, 2 workers × 3 slots with local desktops from the sandbox host 127.0.0.1:$sandboxd_port" >&2

# The tenant's webhook deliveries, received through the API (no inbound
# port) and checked against their signatures, into a log the summary shows.
hooks_log="$demo_dir/webhooks.log"
"$bin/flotilla" webhooks listen >"$hooks_log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do grep -q '^listening as ' "$hooks_log" 2>/dev/null && break; sleep 0.1; done

batch_file="$work/batch.jsonl"
for i in $(seq "${FLOTILLA_DEMO_TASKS:-8}"); do
  priority=normal
  if [ $(( i % 4 )) -eq 0 ]; then priority=high; fi
  python3 - "$i" "$priority" >>"$batch_file" <<'PY'
import json, sys
n, priority = int(sys.argv[1]), sys.argv[2]
if n % 4 == 3:
    # A task with no screen work runs without a sandbox.
    spec = {"prompt": f"demo task {n}: wait", "actions": [{"type": "wait", "ms": 400 + 100 * n}]}
else:
    spec = {
        "prompt": f"demo task {n}: type into the terminal",
        "actions": [
            {"type": "click", "x": 512, "y": 384},
            {"type": "type", "text": f"echo 'hello from demo task {n}'; seq 1 {n}\n"},
            {"type": "wait", "ms": 300},
            {"type": "keypress", "keys": ["ctrl", "l"]},
            {"type": "wait", "ms": 300},
        ],
    }
print(json.dumps({**spec, "priority": priority}))
PY
done
# A task on the browser template: a small web shop placed by its set-up,
# whose order form the agent fills and sends; the receipt it downloads is
# stored as a file of the task, and its check reads the receipt.
# A task with a sensitive step: it waits, code sensitive-action, until a
# person approves it (from the dashboard, or `flotilla approve`).
cat >>"$batch_file" <<'JSON'
{"prompt": "demo: send the weekly report once a person approves", "actions": [{"type": "wait", "ms": 200}, {"type": "confirm", "message": "send the weekly report to the team"}, {"type": "wait", "ms": 200}]}
JSON
python3 scripts/demo_shop.py >>"$batch_file"
# batch_standing BATCH: one line, the batch's tasks counted by status.
batch_standing() {
  "$bin/flotilla" --json tasks --batch "$1" --limit 100 2>/dev/null | python3 -c '
import collections, json, sys
try:
    tasks = json.load(sys.stdin)["tasks"]
except (ValueError, KeyError):
    sys.exit(0)
counts = collections.Counter(task["status"] for task in tasks)
print("demo:   the batch: " + ", ".join("%d %s" % (n, status) for status, n in sorted(counts.items())))
' >&2 || true
}
accepted=$("$bin/flotilla" --json batch "$batch_file" --defaults '{"pipeline": "scripted"}' --no-wait)
batch_id=$(printf '%s' "$accepted" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
mapfile -t ids < <(printf '%s' "$accepted" | python3 -c 'import json,sys; print("\n".join(json.load(sys.stdin)["task_ids"]))')
approval=${ids[-2]}
followed=("${ids[@]:0:${#ids[@]}-2}" "${ids[-1]}")
echo "submitted batch $batch_id with ${#ids[@]} tasks; following them live ($approval waits for approval)" >&2
# Followed while the fleet lives: a worker or the sandbox host that stops
# ends the demo with its log's last lines, not a wait that never ends.
# `watch` prints a task when it ends; between ends the demo says every
# TALK_EVERY_S seconds where the batch stands, so nothing is silent long.
"$bin/flotilla" watch "${followed[@]}" &
watcher=$!
next_talk=$((SECONDS + TALK_EVERY_S))
while kill -0 "$watcher" 2>/dev/null; do
  if [ "$SECONDS" -ge "$next_talk" ]; then
    batch_standing "$batch_id"
    next_talk=$((SECONDS + TALK_EVERY_S))
  fi
  for log in "${!needed[@]}"; do
    if ! kill -0 "${needed[$log]}" 2>/dev/null; then
      kill "$watcher" 2>/dev/null || true
      log "the fleet's $log stopped; the end of its log:"
      tail -n 5 "$work/$log.log" >&2
      exit 1
    fi
  done
  sleep 0.5
done
wait "$watcher"
echo >&2
if [ "$keep" -eq 0 ]; then
  # Without --keep nobody is there to approve: the demo does it, as a
  # person would from the CLI, once the task waits.
  for _ in $(seq 100); do
    [ "$("$bin/flotilla" --json task "$approval" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')" = waiting ] && break
    sleep 0.1
  done
  "$bin/flotilla" approve "$approval" >/dev/null
  "$bin/flotilla" watch "$approval" >/dev/null || true
  echo "approved $approval (with --keep it waits for you in the dashboard)" >&2
fi
"$bin/flotilla" tasks --batch "$batch_id" --limit 20

first=${ids[0]}
echo >&2
echo "screenshots of $first (presigned links, valid for an hour while the store runs):" >&2
"$bin/flotilla" --json task "$first" >"$work/first.json"
python3 - "$work/first.json" <<'PY'
import json, sys
task = json.load(open(sys.argv[1]))
first_seq = {}
for shot in task.get("screenshots", []):
    # A screen seen before is the same stored image: named, not linked again.
    if shot["hash"] in first_seq:
        print("  seq %3d  %s  the same image as seq %d" % (shot["seq"], shot["hash"][:12], first_seq[shot["hash"]]))
        continue
    first_seq[shot["hash"]] = shot["seq"]
    print("  seq %3d  %s  %s" % (shot["seq"], shot["hash"][:12], shot.get("url") or shot["key"]))
PY
shop=${ids[-1]}
"$bin/flotilla" --json task "$shop" >"$work/shop.json"
python3 - "$work/shop.json" <<'PY'
import json, sys
task = json.load(open(sys.argv[1]))
print("the shop task %s (browser template) ended %s, its check: %s" % (task["id"], task["status"], task.get("verdict")), file=sys.stderr)
for stored in task.get("files", []):
    print("  file %s  %s" % (stored["path"], stored.get("url") or stored["key"]))
PY
stored=$(find "$store/flotilla-demo" -name '*.png' | wc -l)
echo "the store keeps $stored distinct images for the whole batch, as files under $store/flotilla-demo" >&2
echo "webhook deliveries so far, each checked against its signature by flotilla webhooks listen (all of them: $hooks_log):" >&2
grep '^verified' "$hooks_log" | sed 's/^/  /' >&2 || echo "  none yet" >&2
[ "$keep" -eq 1 ] || exit 0

# --keep: the fleet stays up; record its PIDs for --stop and say how to use it.
printf '%s\n' "${pids[@]}" >"$pid_file"
cli="FLOTILLA_API_URL=$FLOTILLA_API_URL FLOTILLA_API_KEY=$FLOTILLA_API_KEY $bin/flotilla"
# A task that keeps its desktop for ten minutes, to watch and take over.
watched=$("$bin/flotilla" submit "a desktop to watch: a terminal that stays up for ten minutes" --pipeline scripted \
  --action '{"type": "click", "x": 512, "y": 384}' \
  --action '{"type": "type", "text": "echo take this desktop over to type here\n"}' --wait-ms 600000)
printf '%s\n' "$work" >"$demo_dir/work"
trap - EXIT INT TERM
cat >&2 <<EOF

The fleet keeps running (PIDs in $pid_file).
  dashboard:  $FLOTILLA_API_URL/
  API key:    $FLOTILLA_API_KEY   (type it into the dashboard's key field and press Open)
  the CLI, from any shell:
    $cli submit "one more task" --pipeline scripted --wait-ms 300 --watch
  the screenshot links above answer while the fleet runs.
  watch a desktop live (the dashboard shows it too; the URL opens in a browser):
    $cli view $watched
  take it over, then hand it back (its agent pauses meanwhile):
    $cli takeover $watched
    $cli release $watched --message "typed a line"
  a task that waits for your approval (open it in the dashboard and press Approve, or):
    $cli approve $approval
  the signed webhook deliveries, as flotilla webhooks listen receives them:
    tail -f $hooks_log
  what your tenant used per day (the dashboard's Usage panel charts it):
    $cli usage
  a local desktop from the E2B SDKs (pip install e2b-desktop; then python3 examples/e2b_desktop.py):
    E2B_API_URL=http://127.0.0.1:$sandboxd_port E2B_SANDBOX_URL=http://127.0.0.1:$edge_port E2B_DOMAIN=localhost E2B_API_KEY=$sandboxd_key
  stop it all: bash scripts/demo.sh --stop
EOF
