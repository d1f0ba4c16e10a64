-- explain(id) is explain over the annotation's window (annotation 2: the deploy at 14:03 for
-- 30 s); the summary line of each victim's first cause.
SELECT victim_rank, victim_comm, cause_rank, summary FROM explain(2) WHERE cause_rank = 1;
SELECT (SELECT count(*) FROM explain(2)) =
       (SELECT count(*) FROM explain('2026-11-20 14:03', '2026-11-20 14:03:30')) AS same_rows;
