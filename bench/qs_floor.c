// qs_floor OBJ: loads a BPF object (bench/floor.bpf.c), attaches every program by its
// section name, prints "READY" and holds them until SIGINT/SIGTERM. A condition of
// bench/overhead.sh: the cost of the hooks with nothing in them.
#include <bpf/libbpf.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: %s floor.bpf.o\n", argv[0]);
		return 2;
	}
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj) {
		fprintf(stderr, "qs_floor: open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	int err = bpf_object__load(obj);
	if (err) {
		fprintf(stderr, "qs_floor: load %s: %s\n", argv[1], strerror(-err));
		return 1;
	}
	struct bpf_program *p;
	int n = 0;
	bpf_object__for_each_program(p, obj) {
		if (!bpf_program__attach(p)) {
			fprintf(stderr, "qs_floor: attach %s: %s\n", bpf_program__name(p), strerror(errno));
			return 1;
		}
		n++;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("READY programs=%d\n", n);
	fflush(stdout);
	while (!stop) pause();
	bpf_object__close(obj);  // links are destroyed with the process
	return 0;
}
