-- The victims argument narrows the threads as in blame().
SELECT victim_rank, victim_comm, cause_rank, culprit_comm, round(share_pct, 2) AS share
FROM explain('2026-11-20 14:03', '2026-11-20 14:03:30', 'web');
