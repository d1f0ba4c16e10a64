-- An absolute threshold in a window, one comm; then a tid victim and a pid victim.
SELECT fmt_time(ts) AS at, dur, peak_ns, victim, tid, cause
FROM spikes('sched_delay', '5ms', '2026-11-20 14:00', '2026-11-20 14:10', 'web');
SELECT victim, peak_ns, tid FROM spikes('sched_delay', '5ms', NULL, NULL, 'tid:30');
SELECT victim, peak_ns, tid FROM spikes('sched_delay', '5ms', NULL, NULL, 'pid:30');
