SELECT * FROM spikes('sched_delay', 'three times');
