#!/usr/bin/env python3
"""Per-event BPF cost of rschedd vs runqlat, measured with kernel.bpf_stats_enabled in one run.

For each repetition and each tracer (interleaved), start the tracer, find its programs by diffing
`bpftool prog show` ids, run the workload, and divide the change of run_time_ns by the change of
run_cnt. Prints per-tracer medians and the ratio to runqlat.

Usage (root): bench/bpf_cost.py [--reps N] [--rschedd PATH] [--workload "CMD"]
                                [--baseline PATH [--baseline-groups G]]  # another rschedd binary (an A/B)
                                [--only SUBSTR,...]  # only the tracers whose name has one
"""
import argparse, json, os, random, signal, statistics, subprocess, sys, time

def progs():
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True)
    return {p["id"]: p for p in json.loads(out.stdout)}

def measure(cmd, workload):
    before_ids = set(progs())
    tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ids = set()
    for _ in range(100):  # wait until its programs are loaded and stable
        time.sleep(0.1)
        now = set(progs()) - before_ids
        if now and now == ids:
            break
        ids = now
    time.sleep(0.5)
    a = progs()
    subprocess.run(workload, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    b = progs()
    os.killpg(tracer.pid, signal.SIGINT)
    tracer.wait(timeout=30)
    per = {}
    tot_ns = tot_cnt = switches = 0
    fl_ns = fl_cnt = 0
    for i in ids:
        if i not in a or i not in b:
            continue
        dn = b[i].get("run_time_ns", 0) - a[i].get("run_time_ns", 0)
        dc = b[i].get("run_cnt", 0) - a[i].get("run_cnt", 0)
        if dc > 0:
            name = b[i].get("name", str(i))
            per[name] = dn / dc
            tot_ns += dn
            tot_cnt += dc
            if name.startswith("fl_"):  # the flight recorder's programs
                fl_ns += dn
                fl_cnt += dc
            if name.startswith("sched_switch"):
                switches = max(switches, dc)
    if fl_cnt:
        per["(flight programs alone)"] = fl_ns / fl_cnt
    # ns per event, the programs' ns per event, events, and all the tracer's BPF time per context
    # switch (tracers that attach more tracepoints, such as -g wakeup's interrupt ones, have more
    # and cheaper events: per switch compares what each costs the same workload).
    return ((tot_ns / tot_cnt if tot_cnt else float("nan")), per, tot_cnt,
            (tot_ns / switches if switches else float("nan")))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rschedd", default=os.path.join(os.path.dirname(__file__), "..", "build", "apps", "rschedd", "rschedd"))
    ap.add_argument("--workload", default="stress-ng --switch 2 --timeout 5")
    ap.add_argument("--runqlat", default="/usr/sbin/runqlat")
    ap.add_argument("--baseline", action="append", default=[],
                    help="another rschedd binary (an A/B), run with --baseline-groups; may repeat")
    ap.add_argument("--baseline-groups", default="", help="its -g groups (default: its defaults)")
    ap.add_argument("--only", default="", help="comma-separated substrings: run only tracers whose name "
                    "contains one (runqlat always runs)")
    args = ap.parse_args()
    tracers = {
        "rschedd (default groups)": [args.rschedd, "--no-db", "-i", "1"],
        "rschedd -g latency,migration (service)": [args.rschedd, "--no-db", "-i", "1", "-g",
                                                   "latency,migration"],
        "rschedd -g most": [args.rschedd, "--no-db", "-i", "1", "-g", "most"],
        "rschedd -g latency,blame": [args.rschedd, "--no-db", "-i", "1", "-g", "latency,blame"],
        "rschedd -g latency,migration,blame (service + blame)": [
            args.rschedd, "--no-db", "-i", "1", "-g", "latency,migration,blame"],
        # The flight recorder needs a database (its captures go beside it): a fresh one.
        "rschedd --flight-recorder 10 (default groups + flight)": [
            "sh", "-c", 'd=$(mktemp -d) && trap \'rm -rf "$d"\' EXIT INT && ' + args.rschedd +
            ' --db "$d/r.db" -i 1 --flight-recorder 10'],
        "rschedd -g latency,wakeup": [args.rschedd, "--no-db", "-i", "1", "-g", "latency,wakeup"],
        "rschedd -g latency,migration,blame,wakeup (service + blame + wakeup)": [
            args.rschedd, "--no-db", "-i", "1", "-g", "latency,migration,blame,wakeup"],
        "runqlat": [args.runqlat, "1", "1000"],
    }
    for path in args.baseline:
        g = ["-g", args.baseline_groups] if args.baseline_groups else []
        tag = path if len(args.baseline) > 1 else "rschedd"
        tracers["baseline " + tag + " (" + (args.baseline_groups or "default groups") + ")"] = [
            path, "--no-db", "-i", "1"] + g
    if args.only:
        keys = [k for k in args.only.split(",") if k]
        tracers = {n: c for n, c in tracers.items()
                   if n == "runqlat" or any(k in n for k in keys)}
    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    results = {k: [] for k in tracers}
    per_switch = {k: [] for k in tracers}
    detail = {k: [] for k in tracers}
    try:
        for rep in range(args.reps):
            order = list(tracers)
            random.Random(rep).shuffle(order)
            for name in order:
                w, per, cnt, sw = measure(tracers[name], args.workload)
                results[name].append(w)
                per_switch[name].append(sw)
                detail[name].append(per)
                print(f"rep {rep} {name}: {w:.0f} ns/event over {cnt} events, {sw:.0f} ns/switch  " +
                      ", ".join(f"{k} {v:.0f}" for k, v in sorted(per.items())), flush=True)
    finally:
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
    print(f"\nworkload: {args.workload}; {args.reps} interleaved repetitions; medians:")
    med = {k: statistics.median(v) for k, v in results.items()}
    msw = {k: statistics.median(v) for k, v in per_switch.items()}
    for k, v in med.items():
        print(f"  {k:28s} {v:6.0f} ns/event  [min {min(results[k]):.0f}, max {max(results[k]):.0f}]"
              f"  {msw[k]:6.0f} ns/switch")
    for k, reps in detail.items():
        fl = [p["(flight programs alone)"] for p in reps if "(flight programs alone)" in p]
        if fl:
            print(f"  {k}: flight programs alone {statistics.median(fl):6.0f} ns/event "
                  f"(median), ratio to runqlat {statistics.median(fl) / med['runqlat']:.2f}")
    base = med["runqlat"]
    for k, v in med.items():
        if k != "runqlat":
            print(f"  ratio {k} / runqlat = {v / base:.2f} per event, "
                  f"{msw[k] / msw['runqlat']:.2f} per switch")

if __name__ == "__main__":
    sys.exit(main())
