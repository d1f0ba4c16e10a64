-- spikes() with a baseline multiple, every column: hog's and web's 14:03 spike, one row each,
-- with the tid of the one thread above the threshold and the cause from blame and pressure.
SELECT * FROM spikes('sched_delay', '3x');
