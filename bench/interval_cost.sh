#!/usr/bin/env bash
# rschedd's own cost per interval with N active threads: map drain (reading the kernel side
# alone), drain + delta, and SQLite write time (p50/p99 over the run), bytes written, and
# rschedd's CPU time and RSS.
# Usage (root): [WORKLOAD=c|py] [RSCHEDD=path] [RSCHEDD_ARGS="..."] bench/interval_cost.sh
#               [THREADS] [SECONDS] [GROUPS]
#   RSCHEDD_ARGS: extra rschedd flags, e.g. "--live-read iterator" for the iterator's reads.
#   WORKLOAD=c (default): bench/threads.c, N threads waking every 100 ms (little CPU of its own);
#   WORKLOAD=py: bench/threads.py, the same in Python (its GIL saturates both vCPUs at 1000, so
#   the times then include waiting for a CPU).
set -euo pipefail
n=${1:-1000}; secs=${2:-30}; groups=${3:-latency,migration}
top=$(cd "$(dirname "$0")/.." && pwd)
rschedd=${RSCHEDD:-$top/build/apps/rschedd/rschedd}
workload=${WORKLOAD:-c}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
if [ "$workload" = c ]; then
  cc -O2 -pthread -o "$dir/threads" "$top/bench/threads.c"
  "$dir/threads" "$n" 0.1 $((secs + 5)) 2>/dev/null &
else
  python3 "$top/bench/threads.py" "$n" 0.1 $((secs + 5)) &
fi
wl=$!
sleep 2
/usr/bin/time -f "cpu_user_s=%U cpu_sys_s=%S max_rss_kb=%M" \
  "$rschedd" --db "$dir/b.db" -i 1 -g "$groups" -r "$secs" --stats ${RSCHEDD_ARGS:-} 2> "$dir/err"
kill "$wl" 2>/dev/null || true; wait "$wl" 2>/dev/null || true
grep -m1 "programs attached" "$dir/err" || true
python3 - "$dir/err" "$n" "$secs" "$groups" "$workload" <<'PY'
import re, statistics, sys
txt = open(sys.argv[1]).read()
rows = [tuple(float(x) if x else float("nan") for x in m) for m in re.findall(
    r"threads=(\d+) read_ms=([\d.]+) write_ms=([\d.]+) maint_ms=[\d.]+ rss_kb=\d+(?: drain_ms=([\d.]+))?", txt)]
rows = rows[1:-1] or rows  # drop the first (startup) and last (partial) interval
def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]
th = [r[0] for r in rows]; rd = [r[1] for r in rows]; wr = [r[2] for r in rows]; dr = [r[3] for r in rows]
print(f"threads={sys.argv[2]} seconds={sys.argv[3]} groups={sys.argv[4]} workload={sys.argv[5]} intervals={len(rows)}")
print(f"  threads written per interval: median {statistics.median(th):.0f}")
print(f"  map drain:        p50 {pct(dr,50):.2f} ms  p99 {pct(dr,99):.2f} ms")
print(f"  drain + delta:    p50 {pct(rd,50):.2f} ms  p99 {pct(rd,99):.2f} ms")
print(f"  SQLite write:     p50 {pct(wr,50):.2f} ms  p99 {pct(wr,99):.2f} ms")
print("  " + re.search(r"cpu_user_s=.*", txt).group(0))
PY
ls -l "$dir/b.db" | awk '{print "  database bytes: " $5}'
