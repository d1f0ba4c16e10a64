#!/usr/bin/env python3
"""Does rschedd keep its 1-second cadence under CPU saturation, with and without a terminal?

Runs a switch storm (stress-ng --switch 32 --cpu 4) on every CPU while rschedd records for
--seconds, once with stdout on /dev/null and once on a pseudo-terminal that a reader drains
like a live user (the live view renders every second), and prints the recorded interval
lengths: max, p50, how many were more than 10 % off, and how many were marked stalled.
Needs root. Usage:
    python3 bench/cadence.py [--rschedd build/apps/rschedd/rschedd] [--seconds 20] [ARGS...]
Extra ARGS go to rschedd (for example --rt-priority 0, or -g latency,slice,sleep,migration).
"""
import argparse
import os
import pty
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time


def run(binary, seconds, extra, terminal):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "cadence.db")
        storm = subprocess.Popen(
            ["stress-ng", "--switch", "32", "--cpu", "4", "-t", str(seconds + 4)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        master = None
        if terminal:
            master, slave = pty.openpty()
            out = slave
        else:
            out = subprocess.DEVNULL
        p = subprocess.Popen([binary, "--db", db, "-r", str(seconds)] + extra, stdout=out,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        if terminal:
            os.close(slave)
            os.set_blocking(master, False)
        deadline = time.time() + seconds + 30
        while p.poll() is None and time.time() < deadline:
            if master is not None:
                try:
                    while os.read(master, 1 << 16):
                        pass
                except (BlockingIOError, OSError):
                    pass
            time.sleep(0.05)
        if p.poll() is None:
            p.kill()
            p.wait()
        storm.terminate()
        storm.wait()
        if master is not None:
            os.close(master)
        return summarize(db)


def summarize(db):
    """The recorded raw intervals of `db`: count, p50, max, how many off by > 10 %, stalled."""
    con = sqlite3.connect(db)
    rows = con.execute("SELECT dur_ns, flags FROM intervals WHERE tier = 0 "
                       "ORDER BY start_ns").fetchall()
    con.close()
    full = [r for r in rows if not r[1] & 1]  # the final, partial interval aside
    ms = [r[0] / 1e6 for r in full]
    if not ms:
        return "no intervals recorded"
    off = sum(1 for x in ms if abs(x - 1000) > 100)
    stalled = sum(1 for r in full if r[1] & 2)
    return (f"{len(ms)} intervals, p50 {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms, "
            f"{off} more than 10 % off, {stalled} marked stalled")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rschedd", default="build/apps/rschedd/rschedd")
    ap.add_argument("--seconds", type=int, default=20)
    args, extra = ap.parse_known_args()
    if os.geteuid() != 0:
        sys.exit("cadence.py: needs root (rschedd loads BPF programs)")
    for terminal in (False, True):
        what = "terminal (live view)" if terminal else "no terminal"
        print(f"{what:22s} {run(args.rschedd, args.seconds, extra, terminal)}", flush=True)


if __name__ == "__main__":
    main()
