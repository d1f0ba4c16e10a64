-- coverage() and gaps(): the 13:40-13:45 hole after a final interval is 'rschedd restarted'.
SELECT * FROM coverage();
SELECT fmt_time(ts) AS at, dur, reason FROM gaps();
SELECT covered_ns, round(coverage_pct, 3) AS pct, gaps FROM coverage('2026-11-20 13:30', '2026-11-20 14:00');
SELECT fmt_time(ts) AS at, dur, reason FROM gaps('2026-11-20 12:00', '2026-11-20 13:05');
