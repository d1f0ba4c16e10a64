#!/usr/bin/env bash
# Raw bytes per active thread-second of a real recording, per set of metric groups: rschedd
# records SECONDS s of a workload of N Python threads that each wake every 100 ms (plus one CPU
# hog, so that waits have culprits), once per group set, into a fresh database each; prints the
# database size (pages in use), the active thread-seconds (threads with rows, summed over the
# intervals) and their ratio. Root.
#
# Usage: [RSCHEDD=BINARY] bench/group_storage.sh [SECONDS] [N] [GROUPS...]
#   default: 60 s, 200 threads, "latency,migration,pressure" "latency,migration,pressure,blame"
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
n=${2:-200}
shift 2 || true
sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=("latency,migration,pressure" "latency,migration,pressure,blame")
rschedd=${RSCHEDD:-build/apps/rschedd/rschedd}
sql=build/apps/rsched-sql/rsched-sql
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '%-40s %12s %14s %12s\n' groups bytes thread-seconds bytes/thread-s
for g in "${sets[@]}"; do
  db="$tmp/${g//,/_}.db"
  python3 bench/threads.py "$n" 0.1 $((secs + 4)) 2>/dev/null &
  load=$!
  timeout $((secs + 4)) stress-ng --cpu 1 --quiet >/dev/null 2>&1 &
  hog=$!
  sleep 2
  "$rschedd" -r "$secs" -g "$g" --db "$db" 2>/dev/null
  wait "$load" "$hog" 2>/dev/null || true
  used=$("$sql" "$db" --csv -c "SELECT (page_count - freelist_count) * page_size FROM pragma_page_count, pragma_freelist_count, pragma_page_size" | tail -1 | tr -d '\r')
  ts=$("$sql" "$db" --csv -c "SELECT count(*) FROM (SELECT DISTINCT interval_id, thread_id FROM thread_hist)" | tail -1 | tr -d '\r')
  printf '%-40s %12s %14s %12.1f\n' "$g" "$used" "$ts" "$(echo "$used / $ts" | bc -l)"
done
