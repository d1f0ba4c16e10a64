SELECT comm /* hist_max(hist) */, count(*) FROM sched_delay -- hist_mean(hist)
GROUP BY comm