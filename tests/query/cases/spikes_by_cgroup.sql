-- by 'cgroup': a series per cgroup path, hostile path included as data.
SELECT fmt_time(ts) AS at, dur, peak_ns, victim, top_comms
FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'cgroup');
