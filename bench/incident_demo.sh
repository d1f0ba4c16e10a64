#!/usr/bin/env bash
# Five staged incidents, explained from the page (issues 32 and 50), as root on a machine with
# 2+ CPUs. Four services run throughout:
#   webworker (4 threads waking every 2 ms, one pinned to CPU 1), api (two threads taking a lock
#   that its flusher thread, on CPU 1, holds for 0.5 ms of CPU work every 3 ms), shop (2 ms of
#   CPU work every 10 ms, in a cgroup of its own) and logger (4 KiB appended and fdatasynced
#   every 10 ms, on /var/tmp).
# After a minute of that, one incident every minute, 30 s each:
#   1. rtjob: a SCHED_FIFO job spinning on CPU 1 (webworker's pinned thread waits behind it);
#   2. stress-ng --cpu 4 (a noisy neighbour on every CPU);
#   3. reindex: a nice -10 job spinning on CPU 1 (api's flusher holds its lock for longer: a
#      lock convoy, the root culprit two hops from api);
#   4. shop's cgroup gets a CFS quota of 5 % of a CPU (throttling);
#   5. backup: 32 MiB written and fdatasynced over and over on /var/tmp (logger's fdatasyncs
#      wait behind it).
# rschedd records it all with the systemd unit's groups; a PagerDuty export names each
# incident's window and service and nothing of its cause. Then: the import, explain(id) of each
# incident (its first victims' first causes, their culprit and path) and the report's sections.
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
w="$out/incident_workload"
gcc -O2 -Wall -Wextra -pthread -o "$w" bench/incident_workload.c
now() { date -u +%Y-%m-%dT%H:%M:%SZ; }

# shop's cgroup: at the same path in cgroup v2 and (hybrid hosts) the v1 cpu controller, as
# systemd makes a unit's.
v2=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/self/mounts)
v1cpu=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpu(,|$)/ { print $2; exit }' /proc/self/mounts)
cg=shop-demo-$$
dirs=("$v2/$cg")
[ -n "$v1cpu" ] && dirs+=("$v1cpu/$cg")
for d in "${dirs[@]}"; do mkdir "$d"; done
quota() { # quota US (-1: none)
  if [ -n "$v1cpu" ]; then
    echo 100000 >"$v1cpu/$cg/cpu.cfs_period_us"
    echo "$1" >"$v1cpu/$cg/cpu.cfs_quota_us"
  else
    echo +cpu >"$v2/cgroup.subtree_control"
    if [ "$1" = -1 ]; then echo "max 100000" >"$v2/$cg/cpu.max"; else echo "$1 100000" >"$v2/$cg/cpu.max"; fi
  fi
}
cleanup() {
  for d in "${dirs[@]}"; do rmdir "$d" 2>/dev/null || true; done
  rm -f /var/tmp/rsched-demo-log-$$ /var/tmp/rsched-demo-backup-$$
}
trap cleanup EXIT

total=370
"$rschedd" --db "$db" -i 1 -g latency,migration,blame,wakeup,pressure -r "$total" >"$out/rschedd.log" 2>&1 &
daemon=$!
sleep 2
run=$((total - 6))
"$w" web "$run" &
"$w" api "$run" &
"$w" logger "$run" /var/tmp/rsched-demo-log-$$ &
(for d in "${dirs[@]}"; do echo "$BASHPID" >"$d/cgroup.procs"; done; exec "$w" shop "$run") &
sleep 60
declare -a starts ends
incident() { # incident N COMMAND...
  starts[$1]=$(now)
  "${@:2}"
  ends[$1]=$(now)
  sleep 30
}
incident 1 "$w" rt 30
incident 2 stress-ng --cpu 4 --timeout 30
incident 3 "$w" reindex 30
incident 4 bash -c "$(declare -f quota); v1cpu='$v1cpu' v2='$v2' cg='$cg'; quota 5000; sleep 30; quota -1"
incident 5 "$w" backup 30 /var/tmp/rsched-demo-backup-$$
wait

cat >"$csv" <<CSV
id,incident_number,description,service_name,urgency,created_on,resolved_on,assigned_to_user
PXX1,4101,checkout latency high,webworker,high,${starts[1]},${ends[1]},alice
PXX2,4102,checkout p99 SLO burn,webworker,high,${starts[2]},${ends[2]},bob
PXX3,4103,api requests slow,api,high,${starts[3]},${ends[3]},carol
PXX4,4104,shop timeouts,shop,high,${starts[4]},${ends[4]},dave
PXX5,4105,logger lagging,logger,high,${starts[5]},${ends[5]},erin
CSV
echo "== import"
"$sql" "$db" -c ".import-incidents $csv"
echo "== explain(id) of each incident: its service's worst threads, their first cause, the root culprit and the path"
for id in 1 2 3 4 5; do
  "$sql" "$db" -c "SELECT $id AS incident, victim_rank AS v, victim_comm, victim_tid, victim_class, cause, culprit_comm, culprit_pid, culprit_cgroup, via, round(share_pct) AS share FROM explain($id) WHERE cause_rank = 1 AND victim_rank <= 3"
done
echo "== the report's sections"
"$sql" "$db" report -o "$out/report.html"
python3 - "$out/report.html" <<'PY'
import html, re, sys
page = open(sys.argv[1], encoding="utf-8", errors="replace").read()
for n in range(1, 6):
    m = re.search(r'<section id="annotation-%d">(.*?)</section>' % n, page, re.S)
    if not m:
        print(f"annotation-{n}: no section"); continue
    lead = re.search(r'<p class="lead">(.*?)</p>', m.group(1), re.S)
    text = html.unescape(re.sub(r"<[^>]+>", "", lead.group(1))) if lead else "(no lead)"
    print(f"annotation-{n}: {text}")
PY
echo "files: $out"
