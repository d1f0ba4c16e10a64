-- A comm GLOB reaches the hostile comm (3 samples of 100 us an interval: judged only with
-- min_samples 1); its name comes back as data, quotes, comma, newline and escape bytes kept.
SELECT fmt_time(ts) AS at, dur, peak_ns, victim, tid
FROM spikes('sched_delay', '50us', NULL, NULL, 'comm:ev*', 'tid', 1);
SELECT count(*) FROM spikes('sched_delay', '3x', NULL, NULL, 'comm:ev*');
