#!/usr/bin/env python3
"""Workload throughput loss caused by a scheduler tracer: nothing attached vs rschedd (default
groups), rschedd -g most, libbpf-tools runqlat and `perf sched record`.

Each round visits every tracer configuration once, in a shuffled order (seeded by the round
number), so slow drift of the host hits every configuration alike. A visit starts the tracer,
waits until it has attached (rschedd: "BPF programs attached" on stderr; runqlat: its "Tracing"
line plus 1 s; perf: perf.data has been written plus 1 s), runs the workload, stops the tracer
with SIGINT and deletes its temporary files. The 1-minute load average (and the CPU pressure,
where /proc/pressure/cpu exists) is logged before every run, to show how busy the host was.

Workloads (both saturate the CPUs they run on):
  pipe:   taskset -c 0 perf bench sched pipe -l N      metric: ops/sec from its output
  switch: stress-ng --switch 2 --timeout S --metrics-brief   metric: bogo ops/s (real time)

Prints per-run lines, then per workload a markdown table of medians, IQR and loss % against the
"none" median, and the exact command line.

Usage (root): bench/throughput.py [--reps N] [--workload pipe|switch|both] [--quick]
  rschedd is build/apps/rschedd/rschedd under the repository top unless $RSCHEDD is set.
"""
import argparse
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

TOP = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.dont_write_bytecode = True  # no __pycache__ in bench/
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from quiet import wait_quiet  # noqa: E402


class BenchError(Exception):
    pass


def die(msg):
    print(f"throughput.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def loadavg1():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def cpu_pressure10():
    """'some avg10' of /proc/pressure/cpu (percent of time some task waited for a CPU), or None."""
    try:
        with open("/proc/pressure/cpu") as f:
            m = re.search(r"some avg10=([\d.]+)", f.read())
        return float(m.group(1)) if m else None
    except OSError:
        return None


# ---------------------------------------------------------------- workloads

def parse_pipe(out):
    m = re.search(r"^\s*(\d+)\s+ops/sec", out, re.M)
    if not m:
        raise BenchError("could not find 'ops/sec' in perf bench output:\n" + out)
    return float(m.group(1))


def parse_switch(out):
    # stress-ng: metrc: [pid] switch  <bogo ops> <real s> <usr s> <sys s> <ops/s real> <ops/s cpu>
    for line in out.splitlines():
        m = re.search(r"\]\s+switch\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)",
                      line)
        if m:
            return float(m.group(5))
    raise BenchError("could not find the switch bogo ops/s line in stress-ng output:\n" + out)


def workloads(args):
    return {
        "pipe": (["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", str(args.pipe_loops)],
                 parse_pipe, "ops/s"),
        "switch": (["stress-ng", "--switch", "2", "--timeout", str(args.switch_seconds),
                    "--metrics-brief"], parse_switch, "bogo ops/s"),
    }


def run_workload(cmd, parse):
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=600)
    except subprocess.TimeoutExpired:
        raise BenchError(f"workload {shlex.join(cmd)} did not finish within 600 s")
    if p.returncode != 0:
        raise BenchError(f"workload {shlex.join(cmd)} exited with {p.returncode}:\n{p.stdout}")
    return parse(p.stdout)


# ---------------------------------------------------------------- tracers

def tracer_configs(args):
    """name -> (argv template with {tmp}, how to know it is attached)."""
    return {
        "none": (None, None),
        "rschedd (default groups)": ([args.rschedd, "--db", "{tmp}/rsched.db", "-i", "1"], "rschedd"),
        "rschedd -g most": ([args.rschedd, "--db", "{tmp}/rsched.db", "-i", "1", "-g", "most"],
                            "rschedd"),
        "rschedd --flight-recorder 10": ([args.rschedd, "--db", "{tmp}/rsched.db", "-i", "1",
                                          "--flight-recorder", "10"], "rschedd"),
        "runqlat": (["stdbuf", "-oL", args.runqlat], "runqlat"),
        "perf sched record": (["perf", "sched", "record", "-o", "{tmp}/perf.data"], "perf"),
    }


class Tracer:
    def __init__(self, argv, kind, tmpdir, attach_timeout):
        self.argv = [a.replace("{tmp}", tmpdir) for a in argv]
        self.kind = kind
        self.tmp = tmpdir
        self.out_path = os.path.join(tmpdir, "tracer.out")
        self.err_path = os.path.join(tmpdir, "tracer.err")
        self.attach_timeout = attach_timeout
        self.proc = None

    def _read(self, path):
        try:
            with open(path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def start(self):
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True, cwd=self.tmp)
        deadline = time.monotonic() + self.attach_timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"{shlex.join(self.argv)} exited with {self.proc.returncode} before "
                                 f"attaching:\n{self._read(self.err_path)}{self._read(self.out_path)}")
            if self._attached():
                break
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"{shlex.join(self.argv)} did not attach within "
                                 f"{self.attach_timeout} s:\n{self._read(self.err_path)}")
            time.sleep(0.1)
        # rschedd prints its line once everything is attached; the others get a settle time
        time.sleep(0.2 if self.kind == "rschedd" else 1.0)

    def _attached(self):
        if self.kind == "rschedd":
            return "BPF programs attached" in self._read(self.err_path)
        if self.kind == "runqlat":
            return "Tracing run queue latency" in self._read(self.out_path)
        if self.kind == "perf":
            p = os.path.join(self.tmp, "perf.data")
            return os.path.exists(p) and os.path.getsize(p) > 0
        return True

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGINT to the tracer's process group; returns (exit status, bytes of files it left)."""
        if self.proc is None:
            return None, 0
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=180)  # perf may take a while to finish perf.data
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        size = 0
        for name in os.listdir(self.tmp):
            if name not in ("tracer.out", "tracer.err"):
                try:
                    size += os.path.getsize(os.path.join(self.tmp, name))
                except OSError:
                    pass
        return self.proc.returncode, size

    def perf_summary(self):
        """perf's own report of the recording: (samples written, % of samples lost) or None."""
        if self.kind != "perf":
            return None
        err = self._read(self.err_path)
        m = re.search(r"Captured and wrote [\d.]+ MB .*\((\d+) samples\)", err)
        lost = re.findall(r"lost ([\d.]+)%", err)
        return (int(m.group(1)) if m else None, max(map(float, lost)) if lost else 0.0)


# ---------------------------------------------------------------- checks

def check_tools(args, configs, wl_names):
    missing = []
    if os.geteuid() != 0:
        missing.append("must run as root (tracers load BPF programs / open perf events)")
    need = {"taskset": "util-linux"}
    if "pipe" in wl_names or "perf sched record" in configs:
        need["perf"] = "linux-perf"
    if "switch" in wl_names:
        need["stress-ng"] = "stress-ng"
    if "runqlat" in configs:
        need["stdbuf"] = "coreutils"
    for tool, pkg in need.items():
        if not shutil.which(tool):
            missing.append(f"'{tool}' not found in PATH (Debian package {pkg})")
    if "runqlat" in configs and not (os.path.isfile(args.runqlat) and os.access(args.runqlat, os.X_OK)):
        missing.append(f"runqlat not found at {args.runqlat} (apt-get install libbpf-tools, "
                       "or pass --runqlat PATH)")
    if any(c.startswith("rschedd") for c in configs) and not (
            os.path.isfile(args.rschedd) and os.access(args.rschedd, os.X_OK)):
        missing.append(f"rschedd not found at {args.rschedd} (build it: cmake --build build "
                       "--target rschedd, or set RSCHEDD=PATH)")
    if missing:
        die("cannot run:\n  " + "\n  ".join(missing))


def quartiles(v):
    if len(v) == 1:
        return v[0], v[0], v[0]
    q = statistics.quantiles(v, n=4, method="inclusive")
    return q[0], q[1], q[2]


def fmt_int(x):
    return f"{x:,.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5, help="rounds (each visits every config once)")
    ap.add_argument("--workload", choices=["pipe", "switch", "both"], default="both")
    ap.add_argument("--quick", action="store_true",
                    help="short smoke run: 2 rounds, pipe -l 50000, stress-ng 2 s")
    ap.add_argument("--pipe-loops", type=int, default=200000, help="perf bench sched pipe -l N")
    ap.add_argument("--switch-seconds", type=int, default=5, help="stress-ng --timeout S")
    ap.add_argument("--configs", default="all",
                    help="comma-separated subset of: none,default,most,runqlat,perf (default all)")
    ap.add_argument("--runqlat", default=None, help="path to libbpf-tools runqlat")
    ap.add_argument("--tmpdir", default=None, help="where tracer temp dirs go (default $TMPDIR)")
    ap.add_argument("--attach-timeout", type=float, default=60)
    ap.add_argument("--seed", type=int, default=0, help="added to the round number for shuffling")
    ap.add_argument("--json", help="also write every run's raw result to this file")
    ap.add_argument("--wait-quiet", type=float, default=0, metavar="S",
                    help="before each run wait up to S s until the other load on the host is below "
                         "--busy-max %% of the CPUs and no foreign tracing BPF programs are loaded "
                         "(default 0: no wait; the busy %% is measured and logged anyway)")
    ap.add_argument("--busy-max", type=float, default=25.0)
    args = ap.parse_args()
    if args.quick:
        if "--reps" not in sys.argv:
            args.reps = 2
        args.pipe_loops = min(args.pipe_loops, 50000)
        args.switch_seconds = min(args.switch_seconds, 2)
    if args.reps < 1:
        die("--reps must be at least 1")
    args.rschedd = os.environ.get("RSCHEDD") or os.path.join(TOP, "build", "apps", "rschedd", "rschedd")
    if args.runqlat is None:
        args.runqlat = shutil.which("runqlat") or "/usr/sbin/runqlat"

    all_configs = tracer_configs(args)
    short = {"none": "none", "default": "rschedd (default groups)", "most": "rschedd -g most",
             "flight": "rschedd --flight-recorder 10",
             "runqlat": "runqlat", "perf": "perf sched record"}
    if args.configs == "all":
        configs = {k: v for k, v in all_configs.items()}
    else:
        configs = {}
        for c in args.configs.split(","):
            if c not in short:
                die(f"unknown config '{c}' in --configs (choose from {', '.join(short)})")
            configs[short[c]] = all_configs[short[c]]
        if "none" not in configs:
            die("--configs must include 'none' (the baseline)")
    wl_names = ["pipe", "switch"] if args.workload == "both" else [args.workload]
    check_tools(args, configs, wl_names)
    wls = workloads(args)

    cmdline = "python3 " + shlex.join([os.path.relpath(os.path.abspath(__file__), TOP)] + sys.argv[1:])
    if os.environ.get("RSCHEDD"):
        cmdline = f"RSCHEDD={shlex.quote(os.environ['RSCHEDD'])} " + cmdline
    print(f"# {cmdline}")
    print(f"# date {time.strftime('%Y-%m-%d %H:%M:%S %Z')}, kernel {os.uname().release}, "
          f"{os.cpu_count()} CPUs, rschedd {args.rschedd}")
    for w in wl_names:
        print(f"# workload {w}: {shlex.join(wls[w][0])}")
    for name, (argv, _) in configs.items():
        if argv:
            print(f"# tracer {name}: {shlex.join(argv).replace('{tmp}', 'TMP')}")
    print(flush=True)

    results = {w: {c: [] for c in configs} for w in wl_names}
    runs = []
    tracer_bytes = {c: [] for c in configs}
    perf_lost = {w: [] for w in wl_names}
    current = None
    try:
        for rnd in range(args.reps):
            for w in wl_names:
                order = list(configs)
                random.Random(args.seed * 1000 + rnd * 10 + wl_names.index(w)).shuffle(order)
                for name in order:
                    argv, kind = configs[name]
                    waited, busy, foreign, quiet = wait_quiet(args.wait_quiet, args.busy_max)
                    la, psi = loadavg1(), cpu_pressure10()
                    tmp = tempfile.mkdtemp(prefix="rsched-tp-", dir=args.tmpdir)
                    try:
                        if argv:
                            current = Tracer(argv, kind, tmp, args.attach_timeout)
                            current.start()
                        else:
                            time.sleep(1.0)  # same pause as a tracer's settle time
                        t0 = time.monotonic()
                        ops = run_workload(wls[w][0], wls[w][1])
                        wall = time.monotonic() - t0
                        if current and not current.alive():
                            raise BenchError(f"{name} died during the workload "
                                             f"(status {current.proc.returncode}):\n"
                                             + current._read(current.err_path))
                        status, size = current.stop() if current else (None, 0)
                        psum = current.perf_summary() if current else None
                        if current and kind == "rschedd" and status != 0:
                            raise BenchError(f"{name} exited with {status} after SIGINT:\n"
                                             + current._read(current.err_path))
                        current = None
                    finally:
                        if current:
                            current.stop()
                            current = None
                        shutil.rmtree(tmp, ignore_errors=True)
                    results[w][name].append(ops)
                    if argv:
                        tracer_bytes[name].append(size)
                    if psum:
                        perf_lost[w].append(psum[1])
                    runs.append({"round": rnd, "workload": w, "config": name, "ops_per_s": ops,
                                 "perf_samples_written": psum[0] if psum else None,
                                 "perf_lost_pct": psum[1] if psum else None,
                                 "workload_wall_s": round(wall, 3), "loadavg1_before": la,
                                 "cpu_psi_some_avg10_before": psi, "foreign_bpf_progs": foreign,
                                 "cpu_busy_pct_1s_before": round(busy, 1), "waited_s": round(waited, 1),
                                 "quiet": quiet,
                                 "tracer_files_bytes": size})
                    extra = f"  files {size / 1e6:.1f} MB" if argv and size else ""
                    if psum:
                        extra += f" ({psum[0]} samples, lost {psum[1]:.1f} %)"
                    fb = "" if foreign in (None, 0) else f"  foreign-bpf-progs {foreign}"
                    print(f"round {rnd} {w:6s} {name:26s} {fmt_int(ops):>10s} {wls[w][2]}  "
                          f"({wall:.1f} s)  busy-before {busy:.0f}%  loadavg1 {la:.2f}"
                          + (f"  cpu-psi10 {psi:.1f}%" if psi is not None else "") + fb + extra
                          + (f"  waited {waited:.0f}s" if waited >= 1 else "")
                          + ("" if quiet else "  NOT-QUIET"),
                          flush=True)
    except BenchError as e:
        die(str(e))
    except KeyboardInterrupt:
        if current:
            current.stop()
        print("\ninterrupted; partial results follow", file=sys.stderr)

    print()
    print(f"Command: `{cmdline}`")
    print(f"Date: {time.strftime('%Y-%m-%d')}; {args.reps} rounds, configs shuffled per round; "
          "median [IQR p25..p75] of ops/s; loss % = 1 − median / median(none).")
    for w in wl_names:
        if not results[w]["none"]:
            continue
        base = statistics.median(results[w]["none"])
        print()
        print(f"Workload `{shlex.join(wls[w][0])}` ({wls[w][2]}):")
        print()
        print(f"| config | n | median {wls[w][2]} | IQR | CV | loss vs none |")
        print("|---|---|---|---|---|---|")
        for name in configs:
            v = results[w][name]
            if not v:
                continue
            q1, med, q3 = quartiles(v)
            cv = statistics.pstdev(v) / statistics.mean(v) * 100 if len(v) > 1 else 0.0
            loss = "—" if name == "none" else f"{(1 - med / base) * 100:.1f} %"
            print(f"| {name} | {len(v)} | {fmt_int(med)} | {fmt_int(q1)}..{fmt_int(q3)} | "
                  f"{cv:.1f} % | {loss} |")
    las = [r["loadavg1_before"] for r in runs]
    if las:
        print()
        print(f"1-min loadavg before runs: min {min(las):.2f}, median {statistics.median(las):.2f}, "
              f"max {max(las):.2f} (the workloads themselves keep it near 2 on this 2-CPU VM)")
        psis = [r["cpu_psi_some_avg10_before"] for r in runs if r["cpu_psi_some_avg10_before"] is not None]
        if psis:
            print(f"CPU pressure 'some avg10' before runs: min {min(psis):.1f} %, "
                  f"median {statistics.median(psis):.1f} %, max {max(psis):.1f} %")
        bz = [r["cpu_busy_pct_1s_before"] for r in runs]
        print(f"CPU busy in the 1 s before each run (other load; 0 on an idle host): min {min(bz):.0f} %, "
              f"median {statistics.median(bz):.0f} %, max {max(bz):.0f} %; runs not quiet "
              f"(busy > {args.busy_max:.0f} % or foreign BPF): {sum(1 for r in runs if not r['quiet'])} of {len(runs)}")
        fb = [r["foreign_bpf_progs"] for r in runs if r["foreign_bpf_progs"]]
        if fb:
            print(f"WARNING: {len(fb)} runs started with foreign BPF tracing programs loaded "
                  f"(max {max(fb)}); their cost is in every config of those runs")
    if tracer_bytes.get("perf sched record"):
        print(f"perf sched record perf.data per run: median "
              f"{statistics.median(tracer_bytes['perf sched record']) / 1e6:.0f} MB (deleted)")
        for w in wl_names:
            if perf_lost[w]:
                print(f"perf sched record, {w}: samples lost per perf's own report: median "
                      f"{statistics.median(perf_lost[w]):.1f} % [min {min(perf_lost[w]):.1f}, max "
                      f"{max(perf_lost[w]):.1f}] (a recording that drops samples also costs the "
                      "workload less)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": cmdline, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
