#!/usr/bin/env python3
"""N threads that each wake up every PERIOD seconds for a tiny bit of work: a steady population
of active threads for measuring rschedd's per-interval cost. Runs for DURATION seconds.

All threads are created first, parked on an event, and then released together, each with its
own phase offset within PERIOD (so the wakeups are spread out): creating 10,000 threads while
the first ones already wake every 100 ms would starve the creating thread of the GIL. Prints
"threads.py: N threads running" on stderr once they run."""
import sys, threading, time
n = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
period = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
duration = float(sys.argv[3]) if len(sys.argv) > 3 else 30
threading.stack_size(64 * 1024)
go = threading.Event()
end = 0.0
def work(i):
    go.wait()
    time.sleep(period * i / n)
    while time.monotonic() < end:
        time.sleep(period)
ts = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
for t in ts:
    t.start()
end = time.monotonic() + duration
go.set()
print(f"threads.py: {n} threads running", file=sys.stderr, flush=True)
for t in ts:
    t.join()
