#!/usr/bin/env python3
"""Per-event BPF cost of rschedd vs runqlat, measured with kernel.bpf_stats_enabled in one run.

For each repetition and each tracer (interleaved), start the tracer, find its programs by diffing
`bpftool prog show` ids, run the workload, and divide the change of run_time_ns by the change of
run_cnt. Prints per-tracer medians and the ratio to runqlat.

Usage (root): bench/bpf_cost.py [--reps N] [--rschedd PATH] [--workload "CMD"]
                                [--baseline PATH [--baseline-groups G]]  # another rschedd binary (an A/B)
                                [--only SUBSTR,...]  # only the tracers whose name has one
       bench/bpf_cost.py --paired --baseline PATH [--baseline-groups G] [--reps N] [--workload "CMD"]
                                # both attached at once over the same events, order alternating
"""
import argparse, json, os, random, signal, statistics, subprocess, sys, time

def progs():
    out = subprocess.run(["bpftool", "prog", "show", "--json"], capture_output=True, text=True, check=True)
    return {p["id"]: p for p in json.loads(out.stdout)}

def start(cmd):
    """Starts a tracer; returns it and the ids of the programs it loaded (stable for 0.2 s)."""
    before_ids = set(progs())
    tracer = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    ids = set()
    for _ in range(100):  # wait until its programs are loaded and stable
        time.sleep(0.1)
        now = set(progs()) - before_ids
        if now and now == ids:
            break
        ids = now
    return tracer, ids

def stop(tracer):
    os.killpg(tracer.pid, signal.SIGINT)
    tracer.wait(timeout=30)

def figures(ids, a, b):
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

def measure(cmd, workload):
    tracer, ids = start(cmd)
    time.sleep(0.5)
    a = progs()
    subprocess.run(workload, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    b = progs()
    stop(tracer)
    return figures(ids, a, b)

def measure_paired(cmds, workload):
    """Both tracers attached at once, over the same events: each tracepoint runs the programs
    in the order they were attached (cmds' order), so the caller alternates it."""
    started = [start(c) for c in cmds]
    time.sleep(0.5)
    a = progs()
    subprocess.run(workload, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    b = progs()
    for tracer, _ in started:
        stop(tracer)
    return [figures(ids, a, b) for _, ids in started]

def paired(args, cand, base):
    """--paired: the candidate and one baseline attached together in every repetition, over the
    same events, the one attached first alternating. The first one attached pays more per event
    (the shared kernel data is cold for it, warm for the second): with A = a + f first and
    B = b + f first, (A1 - B1) + (A2 - B2) = 2 (a - b), so a pair of repetitions, one of each
    order, measures the difference with the order's cost cancelled."""
    runs = []  # (candidate first?, candidate ns/event, baseline ns/event)
    switch_runs = []  # the same per context switch (all the tracer's BPF time / switches)
    for rep in range(args.reps):
        cand_first = rep % 2 == 0
        names = ["candidate", "baseline"] if cand_first else ["baseline", "candidate"]
        cmds = [cand, base] if cand_first else [base, cand]
        res = dict(zip(names, measure_paired(cmds, args.workload)))
        c, bl = res["candidate"], res["baseline"]
        runs.append((cand_first, c[0], bl[0]))
        switch_runs.append((cand_first, c[3], bl[3]))
        print(f"rep {rep} ({names[0]} first): candidate {c[0]:.0f} ns/event over {c[2]} events, "
              f"{c[3]:.0f} ns/switch; baseline {bl[0]:.0f} over {bl[2]}, {bl[3]:.0f} ns/switch; "
              f"difference {c[0] - bl[0]:+.0f} ns/event  candidate: " +
              ", ".join(f"{k} {v:.0f}" for k, v in sorted(c[1].items())) + "  baseline: " +
              ", ".join(f"{k} {v:.0f}" for k, v in sorted(bl[1].items())), flush=True)
    summarize(args, runs, "ns per event")
    summarize(args, switch_runs, "ns per context switch")

def summarize(args, runs, unit):
    print(f"\nworkload: {args.workload}; {args.reps} paired repetitions (both attached, the "
          f"first attached alternating); candidate - baseline, {unit}:")
    for first, label in ((True, "candidate attached first"), (False, "baseline attached first")):
        d = [c - b for f, c, b in runs if f == first]
        if d:
            print(f"  {label}: median {statistics.median(d):+.1f} [{min(d):+.0f}, {max(d):+.0f}] "
                  f"over {len(d)}")
    pairs = [((runs[i][1] - runs[i][2]) + (runs[i + 1][1] - runs[i + 1][2])) / 2
             for i in range(0, len(runs) - 1, 2)]
    base_ns = [(runs[i][2] + runs[i + 1][2]) / 2 for i in range(0, len(runs) - 1, 2)]
    if pairs:
        m = statistics.median(pairs)
        print(f"  order cancelled (each pair of repetitions): median {m:+.1f} ({unit}) "
              f"({100 * m / statistics.median(base_ns):+.1f} % of the baseline's "
              f"{statistics.median(base_ns):.0f}), mean {statistics.mean(pairs):+.1f}, "
              f"[{min(pairs):+.1f}, {max(pairs):+.1f}], candidate lower in "
              f"{sum(p < 0 for p in pairs)} of {len(pairs)}")

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
    ap.add_argument("--paired", action="store_true",
                    help="A/B on the same events: --rschedd and the one --baseline attached together "
                    "in every repetition (both with --baseline-groups), the first attached alternating")
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
    if args.paired:
        if len(args.baseline) != 1:
            sys.exit("--paired needs exactly one --baseline")
        g = ["-g", args.baseline_groups] if args.baseline_groups else []
        cand = [args.rschedd, "--no-db", "-i", "1"] + g
        base = [args.baseline[0], "--no-db", "-i", "1"] + g
        old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
        try:
            paired(args, cand, base)
        finally:
            open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
        return 0
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
