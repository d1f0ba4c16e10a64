#!/bin/bash
# What a step of the wall clock does to a recording (issue 51): RSCHEDD records 75 s, the wall
# clock (CLOCK_REALTIME alone, through Debian's libfaketime) jumps 3 days ahead for 5 s and back,
# 5 s more, then SIGINT. Prints the raw intervals kept (count, recorded seconds), those timed in
# the future, the tiers' state and the clock_steps rows. Root, BPF; ~90 s.
#   bench/clock_step.sh build/apps/rschedd/rschedd new
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 RSCHEDD LABEL" >&2
  exit 2
fi
bin=$1
label=$2
lib=/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1
d=$(mktemp -d /var/tmp/clock-step-"$label".XXXXXX)
trap 'rm -rf "$d"' EXIT
echo "+0" >"$d/ft"
LD_PRELOAD=$lib FAKETIME_TIMESTAMP_FILE=$d/ft FAKETIME_NO_CACHE=1 FAKETIME_DONT_FAKE_MONOTONIC=1 \
  "$bin" -i 1 -g latency --db "$d/h.db" 2>"$d/err" >/dev/null &
pid=$!
sleep 75
echo "+3d" >"$d/ft"
sleep 5
echo "+0" >"$d/ft"
sleep 5
kill -INT "$pid"
wait "$pid" || true
echo "== $label"
sqlite3 "$d/h.db" "SELECT 'raw intervals', count(*), round(sum(dur_ns) / 1e9, 1) FROM intervals WHERE tier = 0;
SELECT 'raw intervals timed a day or more ahead', count(*) FROM intervals WHERE tier = 0 AND
  start_ns > strftime('%s', 'now') * 1000000000 + 86400000000000;
SELECT 'tier', tier, 'built_ns', built_ns, 'cutoff_ns', cutoff_ns FROM tiers;"
sqlite3 "$d/h.db" "SELECT 'clock step', at_ns, step_ns FROM clock_steps" 2>&1 || true
grep -E "clock|stopped" "$d/err" || true
