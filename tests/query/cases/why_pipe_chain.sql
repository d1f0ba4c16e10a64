-- why(): web's time in the spike (runnable behind hog, sleeping on db and a timer) and, one hop
-- further, db's (the top waker): runnable behind hog too, sleeping on web and its disk.
SELECT hop, subject, part, state, by_pid, by_comm, ns, round(share_pct, 1) AS share_pct, count FROM why('web', '2026-11-20 14:03', '2026-11-20 14:03:30') ORDER BY hop, part, ns DESC;
SELECT DISTINCT summary FROM why('tid:10', '2026-11-20 14:03', '2026-11-20 14:03:30');
-- A victim with no sleeps (hog) has no second hop; an unknown victim no rows.
SELECT hop, part, by_comm, ns FROM why('hog', '2026-11-20 14:03', '2026-11-20 14:03:30') ORDER BY hop, part, ns DESC;
SELECT count(*) FROM why('nosuchcomm');
