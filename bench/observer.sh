#!/usr/bin/env bash
# The observer effect (issue 31): does rschedd cause the latency it records? With THREADS live
# threads each waking every second (bench/threads.c, the big-server population), an independent
# lateness probe (bench/lateness.c: one nice-0 thread per CPU waking every 1 ms and timing its
# own lateness; no rsched code) runs for SECONDS without rschedd and with it, interleaved, for
# each rschedd setting given (default: the defaults, the kernel's slice instead of the default
# 100 us one, and the former default --rt-priority 1, for comparison). For each run with rschedd it also prints, from rschedd's own
# history of the probe's window: the share of all scheduling delay that rsched's blame puts on
# rschedd, rschedd's CPU share (its CPU time / (CPUs x window), and / the CPU time all of the
# machine was busy: delay only happens while CPUs are busy), the longest wait behind rschedd
# of any thread in one interval, and the recorded cadence (max interval, stalled intervals).
#
# Usage (root): bench/observer.sh [SECONDS] [THREADS] [ROUNDS]     (defaults 30 10000 2)
#   env RSCHEDD, RSCHED_SQL (binaries), SETTINGS (';'-separated rschedd argument sets, "" = the defaults;
#   default ";--recorder-slice-us 0;--rt-priority 1"), GROUPS_RUN (latency,migration,blame,wakeup,pressure: the service's).
set -euo pipefail
secs=${1:-30}; n=${2:-10000}; rounds=${3:-2}
top=$(cd "$(dirname "$0")/.." && pwd)
rschedd=${RSCHEDD:-$top/build/apps/rschedd/rschedd}
rsched_sql=${RSCHED_SQL:-$top/build/apps/rsched-sql/rsched-sql}
groups=${GROUPS_RUN:-latency,migration,blame,wakeup,pressure}
settings=${SETTINGS-";--recorder-slice-us 0;--rt-priority 1"}
die() { echo "observer.sh: error: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (rschedd loads BPF programs)"
[ -x "$rschedd" ] || die "rschedd not found at $rschedd (build it, or set RSCHEDD=PATH)"
[ -x "$rsched_sql" ] || die "rsched-sql not found at $rsched_sql (build it, or set RSCHED_SQL=PATH)"
command -v cc >/dev/null || die "needs a C compiler (cc) for bench/threads.c and bench/lateness.c"
command -v python3 >/dev/null || die "python3 not found"

need=$((n + 4096))
restore=()
for f in pid_max threads-max; do
  cur=$(cat /proc/sys/kernel/$f)
  if [ "$cur" -lt "$need" ]; then
    restore+=("$f=$cur")
    echo "$need" > /proc/sys/kernel/$f
  fi
done
if [ "$(ulimit -u)" != unlimited ] && [ "$(ulimit -u)" -lt "$need" ]; then
  ulimit -u "$need" || die "cannot raise RLIMIT_NPROC to $need"
fi
dir=$(mktemp -d)
wl=
cleanup() {
  if [ -n "$wl" ]; then kill "$wl" 2>/dev/null || true; wait "$wl" 2>/dev/null || true; fi
  rm -rf "$dir"
  for r in "${restore[@]}"; do echo "${r#*=}" > "/proc/sys/kernel/${r%%=*}"; done
}
trap cleanup EXIT
cc -O2 -pthread -o "$dir/threads" "$top/bench/threads.c" || die "cannot build bench/threads.c"
cc -O2 -pthread -o "$dir/lateness" "$top/bench/lateness.c" || die "cannot build bench/lateness.c"

echo "# bench/observer.sh $secs $n $rounds   groups $groups; $(date -u '+%Y-%m-%d %H:%M UTC'), kernel $(uname -r), $(nproc) CPUs"
"$dir/threads" "$n" 1.0 100000 2>/dev/null &
wl=$!
t0=$(date +%s)
while :; do
  have=$(awk '/^Threads:/ {print $2}' "/proc/$wl/status" 2>/dev/null || echo 0)
  [ "${have:-0}" -gt "$n" ] && break
  kill -0 "$wl" 2>/dev/null || die "the workload died while starting its $n threads"
  [ $(( $(date +%s) - t0 )) -lt 300 ] || die "the workload started only $have of $n threads"
  sleep 0.5
done
sleep 3
echo "# workload: $n threads waking every 1 s; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"

python3 - "$rschedd" "$dir" "$secs" "$rounds" "$groups" "$settings" "$rsched_sql" <<'PY'
import os, signal, subprocess, sys, time
rschedd, d, secs, rounds, groups, settings, rsched_sql = sys.argv[1:]
secs, rounds = int(secs), int(rounds)
tck = os.sysconf("SC_CLK_TCK")
ncpu = os.cpu_count()

def probe():
    out = subprocess.run([os.path.join(d, "lateness"), str(secs)], capture_output=True, text=True,
                         check=True).stdout.split()
    return dict(kv.split("=", 1) for kv in out)

def cpu_s(pid):
    total = 0.0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        fields = s[s.rindex(")") + 2:].split()
        total += (int(fields[11]) + int(fields[12])) / tck
    return total

def busy_s():
    """CPU time spent on anything but idle and iowait, all CPUs (s)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v[:8]) - v[3] - v[4]) / tck

def fmt(p):
    return (f"max {int(p['max_us'])/1000:7.2f} ms  p99.9 {int(p['p999_us'])/1000:6.2f} ms  "
            f"p99 {int(p['p99_us'])/1000:6.2f} ms  (per CPU max {p['per_cpu_max_us']} us)")

def with_rschedd(args, tag):
    db = os.path.join(d, f"obs-{tag}.db")
    err = open(os.path.join(d, f"err-{tag}"), "w+")
    cmd = [rschedd, "--db", db, "--db-group", "", "-i", "1", "-g", groups] + args
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
    t_end = time.time() + 60
    while time.time() < t_end:
        err.seek(0)
        if "attached" in err.read():
            break
        if p.poll() is not None:
            err.seek(0)
            sys.exit("rschedd exited: " + err.read())
        time.sleep(0.2)
    time.sleep(4)  # past start-up: the first intervals of a new database
    c0, w0, b0 = cpu_s(p.pid), time.time_ns(), busy_s()
    res = probe()
    c1, w1, b1 = cpu_s(p.pid), time.time_ns(), busy_s()
    p.send_signal(signal.SIGINT)
    p.wait(timeout=60)
    # The probe's window, in whole intervals. Through rsched-sql: thread_blame is a virtual
    # table over the packed rows (schema 13), which a plain sqlite3 connection cannot read.
    def q(sql):
        sql = sql.replace("?", str(w0), 1).replace("?", str(w1), 1)
        out = subprocess.run([rsched_sql, db, "--csv", "-c", sql], check=True,
                             capture_output=True, text=True).stdout.splitlines()
        return [int(float(x)) if x else None for x in out[1].split(",")]
    # sched_delay totals per thread: summed from delay_blame itself (its parts add up to them).
    tot = q("SELECT sum(b.wait_ns) FROM thread_blame b JOIN intervals i ON i.id = b.interval_id "
            "WHERE i.tier = 0 AND i.start_ns >= ? AND i.start_ns + i.dur_ns <= ?")[0] or 0
    mine = q("SELECT sum(b.wait_ns), max(b.wait_ns) FROM thread_blame b "
             "JOIN intervals i ON i.id = b.interval_id JOIN culprit c ON c.id = b.culprit_id "
             "WHERE i.tier = 0 AND i.start_ns >= ? AND i.start_ns + i.dur_ns <= ? "
             "AND c.comm = 'rschedd'")
    cad = q("SELECT max(dur_ns), sum(flags & 2 != 0), count(*) FROM intervals "
            "WHERE tier = 0 AND start_ns >= ? AND start_ns + dur_ns <= ?")
    share = 100.0 * (mine[0] or 0) / tot if tot else 0.0
    cpu_share = 100.0 * (c1 - c0) / (ncpu * (w1 - w0) / 1e9)
    busy_share = 100.0 * (c1 - c0) / (b1 - b0) if b1 > b0 else 0.0
    return res, share, cpu_share, busy_share, (mine[1] or 0) / 1e6, cad

sets = settings.split(";")
for r in range(1, rounds + 1):
    base = probe()
    print(f"round {r}  without rschedd            {fmt(base)}", flush=True)
    for k, s in enumerate(sets):
        args = s.split()
        res, share, cpu_share, busy_share, worst, cad = with_rschedd(args, f"{r}-{k}")
        name = "rschedd " + (s if s else "(defaults)")
        print(f"round {r}  {name:26s} {fmt(res)}", flush=True)
        print(f"          blame on rschedd {share:5.2f} % of all delay; rschedd's CPU share "
              f"{cpu_share:5.2f} % of all, {busy_share:5.2f} % of the busy CPU time; "
              f"longest wait behind it in one interval {worst:6.2f} ms; "
              f"cadence: max interval {cad[0]/1e9:.3f} s, {cad[1]} of {cad[2]} stalled",
              flush=True)
PY
