-- compare() per cgroup and per CPU.
SELECT key, a_count, b_count, a_p99_ns, b_p99_ns, d_p99_ns, excess
FROM compare('2026-11-20 14:00', '2026-11-20 14:03', '2026-11-20 14:03', '2026-11-20 14:03:30', 'cgroup');
SELECT key, a_count, b_count, d_p99_ns FROM compare('2026-11-20 14:00', '2026-11-20 14:03', '2026-11-20 14:03', '2026-11-20 14:03:30', 'cpu');
