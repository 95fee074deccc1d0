# shellcheck shell=bash
# Sourced by the scripts that run long steps (setup.sh, demo.sh, test.sh), so
# no step of theirs is silent for long: a person watching, or a log read
# later, sees every few seconds that the step goes on.
#
# Needs `log MESSAGE` from the sourcing script (its own prefix).

# How often a long step says it goes on.
TALK_EVERY_S=${TALK_EVERY_S:-5}

# talking WHAT COMMAND...: runs COMMAND with its output kept aside and, every
# TALK_EVERY_S seconds while it runs, says that WHAT goes on, for how long,
# and COMMAND's newest line. On failure it prints all of COMMAND's output
# (a compiler's or linter's errors are needed whole) and returns its status.
talking() {
  local what=$1 out pid start next last rc=0
  shift
  out=$(mktemp)
  "$@" >"$out" 2>&1 &
  pid=$!
  start=$SECONDS
  next=$((SECONDS + TALK_EVERY_S))
  while kill -0 "$pid" 2>/dev/null; do
    sleep 0.5
    if [ "$SECONDS" -ge "$next" ]; then
      last=$(tail -n 1 "$out" | tr -d '\r' | cut -c1-100)
      log "  $what: $((SECONDS - start)) s${last:+ · $last}"
      next=$((SECONDS + TALK_EVERY_S))
    fi
  done
  wait "$pid" || rc=$?
  if [ "$rc" -ne 0 ]; then
    log "$what failed (exit $rc); its output:"
    cat "$out" >&2
  fi
  rm -f "$out"
  return "$rc"
}
