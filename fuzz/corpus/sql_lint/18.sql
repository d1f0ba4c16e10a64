SELECT comm, total(total_ns) FROM "sched_delay" -- ts
 WHERE ts >= ?1 GROUP BY comm