-- 'all' merges every thread into one series; a CPU metric is split by CPU.
SELECT fmt_time(ts) AS at, dur, peak_ns, victim, top_comms
FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'all');
SELECT victim AS cpu, fmt_time(ts) AS at, peak_ns, top_comms FROM spikes('cpu_sched_delay', '20ms');
