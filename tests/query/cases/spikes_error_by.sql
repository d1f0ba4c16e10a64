SELECT * FROM spikes('sched_delay', '3x', NULL, NULL, NULL, 'colour');
