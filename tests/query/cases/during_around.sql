-- during() and around() return interval starts overlapping the window.
SELECT count(*), fmt_time(min(ts)), fmt_time(max(ts)) FROM during('2026-11-20 14:03', '2026-11-20 14:03:30');
SELECT count(*) FROM around('2026-11-20 14:03:05', '5s');
SELECT count(*) FROM during('2026-11-20 13:41', '2026-11-20 13:44');
