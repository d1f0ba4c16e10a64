# Sourced by .ci/run: timed steps and lanes that run side by side.
#
#   step NAME CMD...   runs CMD, prints how long it took and records NAME, its time and result
#                      in $CI_TIMES (one line each); returns CMD's status
#   lane NAME FN       runs the shell function FN in the background, its output in
#                      $CI_LOGS/NAME.log; `lanes_wait` prints each lane's log once it is done
#                      and returns non-zero when any lane failed
#   signal NAME RC     tells the other lane that NAME is done with status RC
#   await NAME         waits until NAME is signalled; returns its status
#   ci_summary         the table of every step's time, then the total
#
# Steps inside a lane record their times too (the file is appended to line by line).

CI_T0=${CI_T0:-$(date +%s)}
CI_LOGS=${CI_LOGS:-$(mktemp -d /tmp/rsched-ci.XXXXXX)}
CI_TIMES=${CI_TIMES:-$CI_LOGS/times}
: >"$CI_TIMES"
declare -a CI_LANES=() CI_LANE_PIDS=()

# Seconds since the run began, as m:ss.
ci_clock() {
  local s=$(($(date +%s) - CI_T0))
  printf '%d:%02d' $((s / 60)) $((s % 60))
}

step() {
  local name=$1
  shift
  local start
  start=$(date +%s)
  echo "==> [$(ci_clock)] $name"
  local rc=0
  "$@" || rc=$?
  local took=$(($(date +%s) - start))
  local result=ok
  [ "$rc" -eq 0 ] || result="FAILED (exit $rc)"
  printf '%-44s %5d s  %s\n' "$name" "$took" "$result" >>"$CI_TIMES"
  echo "<== [$(ci_clock)] $name: ${took} s, $result"
  return "$rc"
}

lane() {
  local name=$1 fn=$2
  (
    set -euo pipefail
    "$fn"
  ) >"$CI_LOGS/$name.log" 2>&1 &
  CI_LANES+=("$name")
  CI_LANE_PIDS+=("$!")
  echo "==> [$(ci_clock)] lane $name started (log: $CI_LOGS/$name.log)"
}

lanes_wait() {
  local failed=0 i rc
  for i in "${!CI_LANES[@]}"; do
    rc=0
    wait "${CI_LANE_PIDS[$i]}" || rc=$?
    echo "---------------- lane ${CI_LANES[$i]} (exit $rc) ----------------"
    cat "$CI_LOGS/${CI_LANES[$i]}.log"
    [ "$rc" -eq 0 ] || failed=1
  done
  CI_LANES=()
  CI_LANE_PIDS=()
  return "$failed"
}

signal() {
  [ ! -f "$CI_LOGS/$1.done" ] || return 0 # the first signal stands
  echo "$2" >"$CI_LOGS/$1.done.tmp"
  mv "$CI_LOGS/$1.done.tmp" "$CI_LOGS/$1.done"
}

await() {
  local f="$CI_LOGS/$1.done"
  until [ -f "$f" ]; do
    sleep 2
  done
  return "$(cat "$f")"
}

ci_summary() {
  echo "================ CI step times (steps of the two lanes overlap) ================"
  cat "$CI_TIMES"
  echo "total: $(ci_clock) (m:ss)"
}
