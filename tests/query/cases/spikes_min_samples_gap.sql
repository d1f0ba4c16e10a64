-- min_samples above every interval's count: nothing is judged; gap '0s' keeps one 30-s run.
SELECT count(*) AS n FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'tid', 1000000);
SELECT fmt_time(ts) AS at, dur, victim FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'comm', 10, '0s');
