#!/usr/bin/env bash
# The big-server measurement (issue 16) as one command: rschedd's cost with 10,000 and with
# 1,000 threads that each wake once a second (bench/threads.c), recording the service's groups
# at 1-s intervals over a steady-state minute. For each rschedd binary given (the first is the
# "before" of an A/B, all measured in one run, alternating) it prints, from bench/daemon_cost.sh:
# CPU per interval (process, /proc/PID/stat over the steady state), the recorder thread's CPU
# by stage (drain, parse, delta, assemble, extras, write, maint, publish: --stats), peak and
# last RSS with its slope, and raw bytes per active thread-second.
#
# Usage (root): bench/big_server.sh [RSCHEDD ...]     (default: build/apps/rschedd/rschedd)
#   env SECONDS_RUN (70: the first 10-s window is start-up, the rest the steady minute),
#   GROUPS_RUN (latency,migration,blame,wakeup,pressure: the service's; latency,migration is the
#   storage target's), SIZES ("10000 1000").
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
[ $# -gt 0 ] || set -- "$top/build/apps/rschedd/rschedd"
secs=${SECONDS_RUN:-70}
groups=${GROUPS_RUN:-latency,migration,blame,wakeup,pressure}
for n in ${SIZES:-10000 1000}; do
  for bin in "$@"; do
    echo "=== $n threads, $bin"
    RSCHEDD=$bin WORKLOAD=c "$top/bench/daemon_cost.sh" "$n" "$secs" "$groups" 1.0 |
      grep -E "^# (date|workload)|threads=|CPU steady|by stage|max RSS|raw bytes|flatness|database after|CPU per interval over"
  done
done
