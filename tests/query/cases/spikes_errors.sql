-- A bad argument is one clear line on stderr, naming the function.
SELECT * FROM spikes('no_such_metric', '3x');
