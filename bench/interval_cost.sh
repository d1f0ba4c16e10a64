#!/usr/bin/env bash
# rschedd's own cost per interval with N active threads: map read + delta time and SQLite write
# time (p50/p99 over the run), bytes written, and rschedd's CPU time and RSS.
# Usage (root): bench/interval_cost.sh [THREADS] [SECONDS] [GROUPS]
set -euo pipefail
n=${1:-1000}; secs=${2:-30}; groups=${3:-latency,slice,sleep,migration}
top=$(cd "$(dirname "$0")/.." && pwd)
rschedd=${RSCHEDD:-$top/build/apps/rschedd/rschedd}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
python3 "$top/bench/threads.py" "$n" 0.1 $((secs + 5)) &
wl=$!
sleep 2
/usr/bin/time -f "cpu_user_s=%U cpu_sys_s=%S max_rss_kb=%M" \
  "$rschedd" --db "$dir/b.db" -i 1 -g "$groups" -r "$secs" --stats 2> "$dir/err"
kill "$wl" 2>/dev/null || true; wait "$wl" 2>/dev/null || true
python3 - "$dir/err" "$n" "$secs" "$groups" <<'PY'
import re, statistics, sys
txt = open(sys.argv[1]).read()
rows = [tuple(map(float, m)) for m in re.findall(r"threads=(\d+) read_ms=([\d.]+) write_ms=([\d.]+)", txt)]
rows = rows[1:-1] or rows  # drop the first (startup) and last (partial) interval
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
th = [r[0] for r in rows]; rd = [r[1] for r in rows]; wr = [r[2] for r in rows]
print(f"threads={sys.argv[2]} seconds={sys.argv[3]} groups={sys.argv[4]} intervals={len(rows)}")
print(f"  threads written per interval: median {statistics.median(th):.0f}")
print(f"  map read + delta: p50 {pct(rd,50):.2f} ms  p99 {pct(rd,99):.2f} ms")
print(f"  SQLite write:     p50 {pct(wr,50):.2f} ms  p99 {pct(wr,99):.2f} ms")
print("  " + re.search(r"cpu_user_s=.*", txt).group(0))
PY
ls -l "$dir/b.db" | awk '{print "  database bytes: " $5}'
