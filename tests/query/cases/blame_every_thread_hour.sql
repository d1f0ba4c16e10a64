-- blame() of every thread over the whole history; shares add up to 100.
SELECT by_pid, by_comm, by_cgroup, wait_ns, round(share_pct, 3) AS share, waits, preempts
FROM blame(NULL);
SELECT round(sum(share_pct), 6) AS total_share, sum(wait_ns) = max(victim_wait_ns) AS parts_add_up
FROM blame('');
