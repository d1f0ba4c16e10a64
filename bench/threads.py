#!/usr/bin/env python3
"""N threads that each wake up every PERIOD seconds for a tiny bit of work: a steady population
of active threads for measuring rschedd's per-interval cost. Runs for DURATION seconds."""
import sys, threading, time
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
duration = float(sys.argv[3]) if len(sys.argv) > 3 else 30
threading.stack_size(64 * 1024)
end = time.monotonic() + duration
def work():
    while time.monotonic() < end:
        time.sleep(period)
ts = [threading.Thread(target=work, daemon=True) for _ in range(n)]
for t in ts:
    t.start()
for t in ts:
    t.join()
