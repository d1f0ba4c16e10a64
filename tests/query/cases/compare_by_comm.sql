-- compare(): the 14:00-14:03 baseline against the 14:03-14:03:30 spike, per comm.
SELECT * FROM compare('2026-11-20 14:00', '2026-11-20 14:03', '2026-11-20 14:03', '2026-11-20 14:03:30');
