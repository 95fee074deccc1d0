#!/usr/bin/env bash
# A bounded chaos run (at most 10 minutes) against a local fleet: thousands of
# scripted tasks (some on local desktops, storing screenshots) while workers
# are killed, frozen and restarted at random, Redis is restarted and the S3
# store is paused. Prints its figures as JSON; fails if any task was lost,
# finished twice, or points at a screenshot the store does not have.
#
#   bash scripts/chaos.sh [--tasks 3000] [--desktop-tasks 60] [--workers 3] [--minutes 5] [--seed 7]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --exclude flotilla-benches --bins --quiet
dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug
exec timeout 660 "$dir/flotilla-chaos" "$@"
