#!/usr/bin/env python3
"""Host-noise probes shared by the benchmarks (stdlib only), and a wait for a quiet host.

  cpu_busy(seconds)        percent of all CPUs busy over the next SECONDS (/proc/stat; steal counts)
  foreign_tracing_progs()  BPF programs of tracing types loaded now (None without bpftool)
  wait_quiet(max_wait, busy_max)  wait until the host is idle enough and no one else has
                           tracing BPF programs loaded; returns (waited s, busy %, foreign, ok)

As a command: bench/quiet.py [MAX_WAIT_S [BUSY_MAX_%]]   prints one line and exits 0 (also when
the wait timed out: the line says so).
"""
import json, shutil, subprocess, sys, time

TRACING_TYPES = ("tracing", "raw_tracepoint", "tracepoint", "kprobe", "perf_event")


def _cpu_times():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v[:8]), idle


def cpu_busy(seconds=1.0):
    t0, i0 = _cpu_times()
    time.sleep(seconds)
    t1, i1 = _cpu_times()
    return 100.0 * (1 - (i1 - i0) / max(1, t1 - t0))


def foreign_tracing_progs():
    if not shutil.which("bpftool"):
        return None
    try:
        out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True,
                             timeout=30, check=True).stdout
        return sum(1 for p in json.loads(out) if p.get("type") in TRACING_TYPES)
    except (subprocess.SubprocessError, ValueError):
        return None


def wait_quiet(max_wait, busy_max=25.0):
    t0 = time.monotonic()
    while True:
        busy = cpu_busy(1.0)
        foreign = foreign_tracing_progs()
        ok = busy <= busy_max and not foreign
        waited = time.monotonic() - t0
        if ok or waited >= max_wait:
            return waited, busy, foreign, ok
        time.sleep(2.0)


if __name__ == "__main__":
    mw = float(sys.argv[1]) if len(sys.argv) > 1 else 0
    bm = float(sys.argv[2]) if len(sys.argv) > 2 else 25.0
    waited, busy, foreign, ok = wait_quiet(mw, bm)
    print(f"quiet-check: {'quiet' if ok else 'NOT quiet (gave up)'} after {waited:.0f} s wait: "
          f"CPU busy {busy:.0f} % over 1 s, foreign tracing BPF programs {foreign}")
