-- min_wait: the spike's episode waited 0.30 s: kept at 100ms, left out at 10s; none before 14:00.
SELECT count(*) FROM inversions('2026-11-20 13:00', '2026-11-20 14:30', '100ms');
SELECT count(*) FROM inversions('2026-11-20 13:00', '2026-11-20 14:30', '10s');
SELECT count(*) FROM inversions('2026-11-20 13:00', '2026-11-20 14:00');
