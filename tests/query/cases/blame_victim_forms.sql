-- The victim forms: a cgroup subtree, a pid, a tid, a GLOB; and one with no rows.
SELECT 'cgroup' AS form, by_comm, wait_ns FROM blame('cgroup:/web.slice', '2026-11-20 14:03', '2026-11-20 14:03:30');
SELECT 'pid' AS form, by_comm, wait_ns FROM blame('pid:20', '2026-11-20 14:03', '2026-11-20 14:03:30');
SELECT 'tid' AS form, by_comm, wait_ns FROM blame('tid:30', '2026-11-20 14:03', '2026-11-20 14:03:30');
SELECT 'glob' AS form, by_comm, wait_ns FROM blame('comm:[wd]*', '2026-11-20 14:03', '2026-11-20 14:03:30');
SELECT 'none' AS form, count(*) FROM blame('nosuchcomm');
