-- by 'comm': the comm-merged series only (tid and threads NULL).
SELECT fmt_time(ts) AS at, dur, peak_ns, threshold_ns, victim, tid, threads, top_comms
FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'comm');
