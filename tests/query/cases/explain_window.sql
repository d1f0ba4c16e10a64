-- explain() over the spike: the worst threads against their baseline and their causes.
SELECT victim_rank, victim_tid, victim_comm, baseline_p99_ns, window_p99_ns, wait_ns, expected_ns,
       excess_ns, cause_rank, cause, culprit_pid, culprit_comm, round(share_pct, 2) AS share,
       measure_ns, baseline_ns
FROM explain('2026-11-20 14:03', '2026-11-20 14:03:30');
