-- hist_buckets(): the non-empty buckets of hog's delay over the spike, with inclusive bounds.
SELECT lo_ns, hi_ns, count FROM hist_buckets(
  (SELECT hist_merge(hist) FROM sched_delay WHERE comm = 'hog' AND ts IN during('2026-11-20 14:03', '2026-11-20 14:03:30')));
