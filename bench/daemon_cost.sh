#!/usr/bin/env bash
# rschedd's own cost, measured as CPU time rather than wall time: with THREADS live threads
# (bench/threads.c or bench/threads.py, each waking every PERIOD s), run
# `rschedd --db TMP -i 1 -g GROUPS -r SECONDS --stats` and report
#   * its CPU time (user + sys) per interval: exact totals from wait4() rusage, and per
#     SAMPLE-second window from /proc/PID/stat (flatness: the steady state must not grow);
#   * its max RSS (rusage ru_maxrss) and VmRSS every SAMPLE s (flatness);
#   * database bytes: the file size after `PRAGMA wal_checkpoint(TRUNCATE)`, extrapolated to
#     bytes per hour, plus the bytes it wrote to disk (rusage ru_oublock: WAL + checkpoints);
#   * the --stats wall times (map read + delta, SQLite write) for comparison with
#     bench/interval_cost.sh, and the drop counters of the run.
# The 1-minute loadavg, CPU pressure, the number of threads on the machine (rschedd records all
# of them, not only the workload's) and a calibration loop (CPU time of a fixed bit of Python
# work: this VM reports no steal time, so a busy host shows up as inflated CPU time) are logged
# every SAMPLE s so that host noise is visible.
#
# Usage (root): bench/daemon_cost.sh [THREADS] [SECONDS] [GROUPS] [PERIOD]
#   defaults 1000 60 latency,slice,sleep,migration 0.1; env SAMPLE_S (10), RSCHEDD (binary),
#   RSCHEDD_ARGS (extra rschedd flags, e.g. "--live-read iterator"),
#   WORKLOAD (c or py, see below),
#   KEEP_CSV=FILE (write the per-window samples there), WAIT_QUIET=S (first wait up to S s for the
#   host to be idle, without foreign tracing BPF programs: bench/quiet.py).
set -euo pipefail
n=${1:-1000}; secs=${2:-60}; groups=${3:-latency,slice,sleep,migration}; period=${4:-0.1}
sample=${SAMPLE_S:-10}
top=$(cd "$(dirname "$0")/.." && pwd)
rschedd=${RSCHEDD:-$top/build/apps/rschedd/rschedd}
# thread_hist is a virtual table of rsched's (schema 8): counted through rsched-sql.
rsched_sql=${RSCHED_SQL:-$top/build/apps/rsched-sql/rsched-sql}
die() { echo "daemon_cost.sh: error: $*" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (rschedd loads BPF programs)"
[ -x "$rschedd" ] || die "rschedd not found at $rschedd (build it, or set RSCHEDD=PATH)"
[ -x "$rsched_sql" ] || die "rsched-sql not found at $rsched_sql (build it, or set RSCHED_SQL=PATH)"
command -v python3 >/dev/null || die "python3 not found"
python3 -c 'import sqlite3' 2>/dev/null || die "python3 has no sqlite3 module"

# Room for N more threads: pid_max, threads-max and RLIMIT_NPROC (raised for this shell only;
# the sysctls are raised only when too low, and put back on exit).
need=$((n + 4096))
restore=()
for f in pid_max threads-max; do
  cur=$(cat /proc/sys/kernel/$f)
  if [ "$cur" -lt "$need" ]; then
    restore+=("$f=$cur")
    echo "raising kernel.$f from $cur to $need" >&2
    echo "$need" > /proc/sys/kernel/$f
  fi
done
if [ "$(ulimit -u)" != unlimited ] && [ "$(ulimit -u)" -lt "$need" ]; then
  ulimit -u "$need" || die "cannot raise RLIMIT_NPROC to $need (ulimit -u is $(ulimit -u))"
fi
mm=$(cat /proc/sys/vm/max_map_count)
[ "$mm" -gt $((2 * n + 1000)) ] || die "vm.max_map_count $mm too low for $n thread stacks"

dir=$(mktemp -d)
wl=
cleanup() {
  if [ -n "$wl" ]; then kill "$wl" 2>/dev/null || true; wait "$wl" 2>/dev/null || true; fi
  rm -rf "$dir"
  for r in "${restore[@]}"; do echo "${r#*=}" > "/proc/sys/kernel/${r%%=*}"; done
}
trap cleanup EXIT

echo "# bench/daemon_cost.sh $n $secs $groups $period   (SAMPLE_S=$sample WORKLOAD=${WORKLOAD:-default} WAIT_QUIET=${WAIT_QUIET:-0})"
echo "# date $(date -u '+%Y-%m-%d %H:%M:%S UTC'), kernel $(uname -r), $(nproc) CPUs, rschedd $rschedd"
if [ "${WAIT_QUIET:-0}" != 0 ]; then echo "# $(python3 "$top/bench/quiet.py" "$WAIT_QUIET")"; fi
echo "# loadavg before starting the workload: $(cut -d' ' -f1-4 /proc/loadavg)"

# The workload: it must outlive rschedd; it is killed on exit. WORKLOAD=c (default when a C
# compiler is there): bench/threads.c; WORKLOAD=py: bench/threads.py (Python's GIL makes 10,000
# Python threads saturate 2 CPUs by themselves).
workload=${WORKLOAD:-$(command -v cc >/dev/null && echo c || echo py)}
case $workload in
  c) command -v cc >/dev/null || die "WORKLOAD=c needs a C compiler (cc)"
     cc -O2 -pthread -o "$dir/threads" "$top/bench/threads.c" || die "cannot build bench/threads.c"
     wlcmd=("$dir/threads" "$n" "$period" $((secs + 600)));;
  py) wlcmd=(python3 "$top/bench/threads.py" "$n" "$period" $((secs + 600)));;
  *) die "WORKLOAD must be c or py";;
esac
"${wlcmd[@]}" 2>/dev/null &
wl=$!
t0=$(date +%s)
while :; do
  have=$(awk '/^Threads:/ {print $2}' "/proc/$wl/status" 2>/dev/null || echo 0)
  [ "${have:-0}" -gt "$n" ] && break
  kill -0 "$wl" 2>/dev/null || die "workload ($workload) died while starting its $n threads"
  [ $(( $(date +%s) - t0 )) -lt 300 ] || die "workload ($workload) started only $have of $n threads in 300 s"
  sleep 0.5
done
echo "# workload ($workload): ${wlcmd[*]/#$dir/TMP} : $have threads in $(( $(date +%s) - t0 )) s"
sleep 3  # let thread start-up settle
echo "# loadavg before starting rschedd: $(cut -d' ' -f1-4 /proc/loadavg)"

python3 - "$rschedd" "$dir" "$n" "$secs" "$groups" "$sample" "$wl" "${KEEP_CSV:-}" "$rsched_sql" <<'PY'
import os, re, sqlite3, statistics, subprocess, sys, time
rschedd, d, n, secs, groups, sample, wl, csv_path, rsched_sql = sys.argv[1:]
n, secs, sample, wl = int(n), int(secs), float(sample), int(wl)
tck = os.sysconf("SC_CLK_TCK")
db = os.path.join(d, "b.db")
err_path = os.path.join(d, "err")
cmd = [rschedd, "--db", db, "-i", "1", "-g", groups, "-r", str(secs), "--stats"] + \
    os.environ.get("RSCHEDD_ARGS", "").split()
print("# rschedd: " + " ".join(cmd).replace(d, "TMP"))

def stat_cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    return int(fields[11]) / tck, int(fields[12]) / tck   # utime, stime (fields 14, 15)

def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0

def stats_lines():
    try:
        with open(err_path, errors="replace") as f:
            txt = f.read()
    except OSError:
        return []
    return [tuple(map(float, m)) for m in
            re.findall(r"threads=(\d+) read_ms=([\d.]+) write_ms=([\d.]+)", txt)]

def loadavg():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])

def calib_ms():
    """CPU time (this thread) of a fixed bit of work: the guest charges time the host takes away
    (steal is not reported here) to whoever runs, so this shows how fast the vCPU was."""
    t = time.thread_time()
    x = 0
    for i in range(100000):
        x += i * i
    return (time.thread_time() - t) * 1000

def system_threads():
    with open("/proc/loadavg") as f:
        return int(f.read().split()[3].split("/")[1])

def psi():
    try:
        with open("/proc/pressure/cpu") as f:
            return float(re.search(r"some avg10=([\d.]+)", f.read()).group(1))
    except (OSError, AttributeError):
        return float("nan")

err = open(err_path, "w")
proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
pid = proc.pid
start = time.monotonic()
samples = []   # (t, utime, stime, vmrss_kb, vmhwm_kb, intervals_done, wl_threads, loadavg, psi,
               #  system threads, calibration ms)
rusage = status = None
next_t = start
while True:
    now = time.monotonic()
    if now >= next_t:
        try:
            u, s = stat_cpu(pid)
            rss, hwm = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
            wlt = status_kb(wl, "Threads") if os.path.exists(f"/proc/{wl}") else 0
            samples.append((now - start, u, s, rss, hwm, len(stats_lines()), wlt, loadavg(), psi(),
                            system_threads(), calib_ms()))
        except (OSError, ValueError):
            pass
        next_t += sample
    r = os.wait4(pid, os.WNOHANG)
    if r[0] == pid:
        status, rusage = r[1], r[2]
        break
    time.sleep(0.05)
wall = time.monotonic() - start
err.close()
rc = os.waitstatus_to_exitcode(status)
errtxt = open(err_path, errors="replace").read()
rows = stats_lines()
if rc != 0 or not rows:
    print(f"rschedd exited with status {rc} after {wall:.1f} s; its stderr:\n{errtxt}")
    sys.exit(1)

# database: checkpoint into the main file, then measure
con = sqlite3.connect(db)
ck = con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
n_iv, dur_ns = con.execute("SELECT count(*), sum(dur_ns) FROM intervals WHERE tier = 0").fetchone()
drops = con.execute("SELECT sum(drops_task_state), sum(drops_graveyard), sum(drops_stale_tid), "
                    "sum(drops_no_rq) FROM intervals").fetchone()
def rsql(q):
    out = subprocess.run([rsched_sql, db, "--csv", "-c", q], check=True, capture_output=True,
                         text=True).stdout
    return int(out.strip().splitlines()[-1])
n_th = rsql("SELECT count(*) FROM thread_hist")
# active thread-seconds: (interval, thread) pairs with any row (1-s intervals)
active_ts = rsql("SELECT count(*) FROM (SELECT interval_id, thread_id FROM thread_hist "
                 "UNION SELECT interval_id, thread_id FROM thread_migration)")
n_thread = con.execute("SELECT count(*) FROM thread").fetchone()[0]
page = con.execute("PRAGMA page_size").fetchone()[0]
pages, free = con.execute("PRAGMA page_count").fetchone()[0], con.execute("PRAGMA freelist_count").fetchone()[0]
con.close()
size = os.path.getsize(db)
wal = os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0
rec_s = dur_ns / 1e9

def pct(v, p):
    v = sorted(v); return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]

cpu_u, cpu_s = rusage.ru_utime, rusage.ru_stime
cpu = cpu_u + cpu_s
print(f"threads={n} seconds={secs} groups={groups} intervals={n_iv} (rschedd wall {wall:.1f} s, "
      f"exit {rc})")
steady = rows[1:-1] or rows
print(f"  threads written per interval: median {statistics.median(r[0] for r in steady):.0f} "
      f"[min {min(r[0] for r in steady):.0f}, max {max(r[0] for r in steady):.0f}]")
print(f"  --stats wall times: map read + delta p50 {pct([r[1] for r in steady], 50):.2f} / p99 "
      f"{pct([r[1] for r in steady], 99):.2f} ms; SQLite write p50 "
      f"{pct([r[2] for r in steady], 50):.2f} / p99 {pct([r[2] for r in steady], 99):.2f} ms")
print(f"  CPU total (rusage, incl. start-up and exit): {cpu_u:.2f} s user + {cpu_s:.2f} s sys = "
      f"{cpu:.2f} s -> {cpu / n_iv * 1000:.1f} ms per interval ({cpu / rec_s * 100:.1f} % of one CPU)")
# steady state: from the first sample taken after >= 2 intervals to the last sample
st = [x for x in samples if x[5] >= 2]
if len(st) >= 2 and st[-1][5] > st[0][5]:
    a, b = st[0], st[-1]
    di = b[5] - a[5]
    print(f"  CPU steady state (/proc/PID/stat, {b[0] - a[0]:.0f} s, {di} intervals): "
          f"{(b[1] - a[1]) / di * 1000:.1f} ms user + {(b[2] - a[2]) / di * 1000:.1f} ms sys = "
          f"{((b[1] - a[1]) + (b[2] - a[2])) / di * 1000:.1f} ms per interval")
print(f"  max RSS (rusage ru_maxrss): {rusage.ru_maxrss / 1024:.1f} MiB; last VmRSS sample "
      f"{samples[-1][3] / 1024:.1f} MiB" if samples else "")
print(f"  database after wal_checkpoint(TRUNCATE) {ck}: {size} bytes ({pages} pages of {page} B, "
      f"{free} free), WAL {wal} bytes; {n_iv} intervals over {rec_s:.1f} s recorded")
print(f"    -> {size / n_iv / 1024:.1f} KiB per interval = {size / n_iv * 3600 / 1e6:.0f} MB per hour "
      f"(= {size / n_iv * 86400 / 1e9:.2f} GB per day) at one interval per second; per wall-clock time "
      f"recorded ({rec_s:.1f} s): {size / rec_s * 3600 / 1e6:.0f} MB per hour")
print(f"    thread_hist rows {n_th} ({n_th / n_iv:.0f} per interval; packed in "
      f"thread_hist_pack from schema 8), thread rows {n_thread}")
print(f"    raw bytes per active thread-second: {size / max(1, active_ts):.1f} "
      f"({active_ts} thread-intervals with a row, over {rec_s:.1f} s)")
# where the recorder thread's CPU goes (--stats cpu_*_ms; steady-state intervals)
stages = ["drain", "parse", "delta", "assemble", "extras", "write", "maint", "publish"]
per = [dict(zip(stages, map(float, m))) for m in re.findall(
    r"cpu_drain_ms=([\d.]+) cpu_parse_ms=([\d.]+) cpu_delta_ms=([\d.]+) cpu_assemble_ms=([\d.]+) "
    r"cpu_extras_ms=([\d.]+) cpu_write_ms=([\d.]+) cpu_maint_ms=([\d.]+) cpu_publish_ms=([\d.]+)",
    errtxt)]
per = per[1:-1] or per
if per:
    med = {k: statistics.median(x[k] for x in per) for k in stages}
    tot = [sum(x.values()) for x in per]
    print("  recorder thread CPU per interval by stage, median over " + str(len(per)) + " intervals (ms): " +
          ", ".join(f"{k} {med[k]:.2f}" for k in stages) +
          f"; sum p50 {statistics.median(tot):.2f}, p99 {pct(tot, 99):.2f}")
    print("    mean (max) by stage (ms): " +
          ", ".join(f"{k} {statistics.fmean(x[k] for x in per):.2f} ({max(x[k] for x in per):.1f})"
                    for k in stages) + f"; sum mean {statistics.fmean(tot):.2f}")
print(f"  bytes written to disk by rschedd (rusage ru_oublock x 512, WAL + checkpoints): "
      f"{rusage.ru_oublock * 512 / 1e6:.1f} MB -> {rusage.ru_oublock * 512 / n_iv * 3600 / 1e6:.0f} MB per hour "
      f"at one interval per second")
print(f"  drops over the run: task_state {drops[0]}, graveyard {drops[1]}, stale_tid {drops[2]}, "
      f"no_rq {drops[3]}")
other = [l for l in errtxt.splitlines() if not l.startswith("rschedd-stats:")]
print("  rschedd stderr (other than --stats): " + " | ".join(other))

# flatness: per-window CPU and RSS
print()
print(f"  per {sample:.0f}-s window: t_end s | intervals done | rschedd CPU ms (user+sys) | % of one CPU | "
      "CPU ms per interval | VmRSS MiB | all threads | loadavg1 | cpu-psi10 % | threads written/interval (median) | "
      "calibration loop ms (CPU time of fixed work; higher = slower vCPU)")
win = []
for a, b in zip(samples, samples[1:]):
    di = b[5] - a[5]
    c = ((b[1] - a[1]) + (b[2] - a[2])) * 1000
    win.append((b[0], di, c, b[3] / 1024))
    tw = [r[0] for r in rows[a[5]:b[5]]]
    tw = f"{statistics.median(tw):.0f}" if tw else "-"
    per = f"{c / di:6.1f}" if di else "     -"
    print(f"    {b[0]:6.0f} | {di:3d} | {c:6.0f} | {c / 10 / (b[0] - a[0]):5.1f} | {per} | {b[3] / 1024:6.1f} | "
          f"{b[9]} | {b[7]:.2f} | {b[8]:.1f} | {tw} | {b[10]:.1f}")
if csv_path:
    with open(csv_path, "w") as f:
        f.write("t_s,utime_s,stime_s,vmrss_kb,vmhwm_kb,intervals_done,workload_threads,loadavg1,"
                "cpu_psi10,system_threads,calib_ms\n")
        for x in samples:
            f.write(",".join(str(v) for v in x) + "\n")
full = win[1:]   # drop the window holding start-up
if len(full) >= 4:
    h = len(full) // 2
    def per_iv(ws):
        i = sum(w[1] for w in ws)
        return sum(w[2] for w in ws) / i if i else float("nan")
    t = [w[0] for w in full]
    slope_rss = statistics.linear_regression(t, [w[3] for w in full]).slope
    pw = [w[2] / w[1] for w in full if w[1]]
    print(f"  CPU per interval over the {len(pw)} windows after the first: median {statistics.median(pw):.1f} ms, "
          f"min {min(pw):.1f}, max {max(pw):.1f}; calibration loop median "
          f"{statistics.median(x[10] for x in samples[2:]):.1f} ms [min {min(x[10] for x in samples[2:]):.1f}, "
          f"max {max(x[10] for x in samples[2:]):.1f}]")
    print(f"  flatness over {len(full)} windows after the first ({full[0][0] - sample:.0f}..{full[-1][0]:.0f} s): "
          f"CPU per interval {per_iv(full[:h]):.1f} ms in the first half, {per_iv(full[h:]):.1f} ms in the "
          f"second half; VmRSS {full[0][3]:.1f} -> {full[-1][3]:.1f} MiB (min {min(w[3] for w in full):.1f}, "
          f"max {max(w[3] for w in full):.1f}), least-squares slope {slope_rss * 60:+.3f} MiB/min")
PY
echo "# loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
