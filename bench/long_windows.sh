#!/usr/bin/env bash
# Issue 32's long-window timings over a generated history (docs/PERFORMANCE.md, "Long windows"):
# wall time of each query through rsched-sql, one run each (run it twice: the first warms the
# page cache).
# Usage: bench/long_windows.sh RSCHED_SQL DB E   (E: the history's end, as the generator prints)
set -euo pipefail
R=$1
DB=$2
E=$3
H=3600000000000
M=60000000000
q() {
  local s
  s=$(date +%s%N)
  "$R" "$DB" --csv -c "$1" >/dev/null || echo FAIL
  echo "$((($(date +%s%N) - s) / 1000000)) ms | $2"
}
q "SELECT count(*) FROM spikes('sched_delay','3x', $((E - 3 * H)), $((E - 3 * H + 5 * M)))" "spikes 5 min count"
q "SELECT count(*) FROM spikes('sched_delay','3x', $((E - H)), $E)" "spikes hour count"
q "SELECT count(cause), count(top_comms) FROM spikes('sched_delay','3x', $((E - H)), $E)" "spikes hour cause+top_comms"
q "SELECT count(*) FROM spikes('sched_delay','3x', $((E - 24 * H)), $E)" "spikes day count"
q "SELECT count(*) FROM spikes('sched_delay','3x', $((E - 24 * H)), $E, NULL, 'comm')" "spikes day by comm"
q "SELECT count(*) FROM explain($((E - H)), $E)" "explain hour"
q "SELECT * FROM blame('postgres', $((E - H)), $E)" "blame postgres hour"
q "SELECT * FROM blame('', $((E - H)), $E)" "blame all hour"
q "SELECT * FROM blame('tid:1234', $((E - H)), $E)" "blame tid hour"
s=$(date +%s%N)
out=$(mktemp -d)
"$R" "$DB" report --from $(((E - H) / 1000000000)) --to $((E / 1000000000)) -o "$out/r.html" 2>/dev/null
echo "$((($(date +%s%N) - s) / 1000000)) ms | report hour"
rm -rf "$out"
