-- The annotations of the fixture: rschedd's own (sched_ext enabled) and an imported deploy.
SELECT id, fmt_time(start_ns) AS at, end_ns - start_ns AS span, source, tags, text FROM annotations ORDER BY id;
