// Loads and attaches every program of a BPF object, then waits for SIGINT (bench/bpf_floor.sh).
#include <bpf/libbpf.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int s)
{
	(void)s;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: floor_load OBJECT\n");
		return 2;
	}
	struct bpf_object *o = bpf_object__open_file(argv[1], NULL);
	if (o == NULL || bpf_object__load(o) != 0) {
		fprintf(stderr, "floor_load: loading %s failed\n", argv[1]);
		return 1;
	}
	struct bpf_program *p;
	bpf_object__for_each_program(p, o)
	{
		if (bpf_program__attach(p) == NULL) {
			fprintf(stderr, "floor_load: attaching %s failed\n", bpf_program__name(p));
			return 1;
		}
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	while (!stop) {
		pause();
	}
	return 0;
}
