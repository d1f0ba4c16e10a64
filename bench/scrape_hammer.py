#!/usr/bin/env python3
"""Does rschedd keep its 1-second cadence while scrapers hammer --metrics-listen?

Runs rschedd for --seconds with --metrics-listen on loopback four times: nobody scraping; a
Prometheus-like scraper (one GET a second); --clients processes that GET /metrics in a tight loop
(half of them asking for OpenMetrics); the same plus as many that connect and never send (stalled
clients holding workers until the timeout). A switch storm (stress-ng) keeps the CPUs busy in all
runs. Prints the recorded interval lengths (p50, max, how many more than 10 % off, how many
marked stalled) and the scrapes served. Needs root. Usage:
    python3 bench/scrape_hammer.py [--rschedd build/apps/rschedd/rschedd] [--seconds 20]
                                   [--clients 8] [ARGS...]
Extra ARGS go to rschedd.
"""
import argparse
import multiprocessing
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cadence import summarize  # noqa: E402  (the same summary as the cadence benchmark)

REQ = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
REQ_OM = (b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
          b"Accept: application/openmetrics-text;version=1.0.0\r\n\r\n")


def scrape(port, req):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req)
        n = 0
        while True:
            b = s.recv(1 << 16)
            if not b:
                return n
            n += len(b)


def hammer(port, om, stop_at, counter):
    while time.time() < stop_at:
        try:
            if scrape(port, REQ_OM if om else REQ) > 0:
                with counter.get_lock():
                    counter.value += 1
        except OSError:
            time.sleep(0.01)


def stall(port, stop_at):
    socks = []
    while time.time() < stop_at:
        try:
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError:
            pass
        time.sleep(0.5)
        if len(socks) > 50:
            socks.pop(0).close()


def polite(port, stop_at, counter):
    while time.time() < stop_at:
        try:
            if scrape(port, REQ_OM) > 0:
                with counter.get_lock():
                    counter.value += 1
        except OSError:
            pass
        time.sleep(1)


def run(binary, seconds, extra, mode, clients):
    with tempfile.TemporaryDirectory() as d:
        db = os.path.join(d, "hammer.db")
        storm = subprocess.Popen(
            ["stress-ng", "--switch", "32", "--cpu", "4", "-t", str(seconds + 6)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1)
        p = subprocess.Popen([binary, "--db", db, "-r", str(seconds), "--metrics-listen",
                              "127.0.0.1:0"] + extra, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        port = None
        for line in p.stderr:
            m = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", line)
            if m:
                port = int(m.group(1))
            if "attached" in line:
                break
        if port is None:
            p.kill()
            storm.kill()
            return "rschedd did not start"
        stop_at = time.time() + seconds
        counter = multiprocessing.Value("l", 0)
        procs = []
        if mode == "polite":
            procs.append(multiprocessing.Process(target=polite, args=(port, stop_at, counter)))
        elif mode in ("loops", "hammer"):
            for i in range(clients):
                procs.append(multiprocessing.Process(target=hammer,
                                                     args=(port, i % 2 == 1, stop_at, counter)))
                if mode == "hammer":
                    procs.append(multiprocessing.Process(target=stall, args=(port, stop_at)))
        for pr in procs:
            pr.start()
        p.stderr.read()
        p.wait()
        for pr in procs:
            pr.join()
        storm.terminate()
        storm.wait()
        summary = summarize(db)
    return f"{summary}; {counter.value / seconds:.0f} scrapes/s served"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rschedd", default="build/apps/rschedd/rschedd")
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=8)
    args, extra = ap.parse_known_args()
    if os.geteuid() != 0:
        sys.exit("scrape_hammer.py: needs root (rschedd loads BPF programs)")
    for mode in ("none", "polite", "loops", "hammer"):
        what = {"none": "no scraper", "polite": "1 scrape/s", "loops": f"{args.clients} loops",
                "hammer": f"{args.clients} loops + {args.clients} stalled"}[mode]
        print(f"{what:24s} {run(args.rschedd, args.seconds, extra, mode, args.clients)}",
              flush=True)


if __name__ == "__main__":
    main()
