-- inversions(): web (nice -5) behind hog (SCHED_FIFO 1) during the spike; db (nice 0) is
-- not raised, so never an inversion.
SELECT * FROM inversions();
