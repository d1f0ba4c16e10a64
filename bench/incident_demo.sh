#!/usr/bin/env bash
# A staged incident, explained (issue 32's "Done when"), as root on a machine with 2+ CPUs:
#   a service "webworker" (4 threads waking every 2 ms, one pinned to CPU 1) runs throughout;
#   from 50 s to 90 s a SCHED_FIFO batch job "rtjob" spins on CPU 1 (the pinned thread waits
#   behind it); from 120 s to 160 s CPU hogs (stress-ng --cpu 4) load every CPU. rschedd
#   records it all with the service's groups; a PagerDuty export names the two incidents'
#   windows and nothing of their cause. Then: the import, explain(id) of each incident and the
#   report's per-annotation sections, which must name the culprits.
# Usage: bench/incident_demo.sh [OUT_DIR]   (default: a new temporary directory, kept)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d /tmp/rsched-incident.XXXXXX)}
mkdir -p "$out"
db="$out/incident.db"
csv="$out/pagerduty.csv"
rm -f "$db" "$db-wal" "$db-shm"
rschedd=build/apps/rschedd/rschedd
sql=build/apps/rsched-sql/rsched-sql
gcc -O2 -Wall -Wextra -pthread -o "$out/incident_workload" bench/incident_workload.c
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

"$rschedd" --db "$db" -i 1 -g latency,migration,blame,wakeup,pressure -r 195 >"$out/rschedd.log" 2>&1 &
daemon=$!
sleep 2
"$out/incident_workload" web 190 &
web=$!
sleep 48
i1_start=$(now)
"$out/incident_workload" rt 40
i1_end=$(now)
sleep 30
i2_start=$(now)
stress-ng --cpu 4 --timeout 40 >/dev/null 2>&1
i2_end=$(now)
wait "$web"
wait "$daemon"

cat >"$csv" <<CSV
id,incident_number,description,service_name,urgency,created_on,resolved_on,assigned_to_user
PXX1,4101,checkout latency high,checkout,high,$i1_start,$i1_end,alice
PXX2,4102,checkout p99 SLO burn,checkout,high,$i2_start,$i2_end,bob
CSV
echo "== import"
"$sql" "$db" -c ".import-incidents $csv"
echo "== explain(id) of each incident: the worst webworker threads, their first causes"
for id in 1 2; do
  "$sql" "$db" -c "SELECT $id AS incident, victim_rank, victim_tid, cause_rank, cause, culprit_comm, culprit_pid, share_pct, summary FROM explain($id) WHERE victim_comm = 'webworker' AND cause_rank <= 2 LIMIT 4"
done
echo "== the report's sections"
"$sql" "$db" report -o "$out/report.html"
python3 - "$out/report.html" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8", errors="replace").read()
for n in (1, 2):
    m = re.search(r'<section id="annotation-%d">(.*?)</section>' % n, page, re.S)
    if not m:
        print(f"annotation-{n}: no section"); continue
    text = html.unescape(re.sub(r"<[^>]+>", " ", m.group(1)))
    text = re.sub(r"\s+", " ", text)
    print(f"annotation-{n}: {text[:600]}")
PY
echo "(database, CSV and report in $out)"
