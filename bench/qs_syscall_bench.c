/* Per-event cost probes for bench/overhead.sh: a tight loop of one kind of kernel event,
 * timed in user space. Each probe family qscope attaches to fires on these: getppid
 * (every syscall when syscall tracepoints are on), futex wake (futex paths), loopback
 * ping-pong (sock_recv/send_length, sk_data_ready, sched_switch/wakeup).
 *   qs_syscall_bench MODE ITERATIONS [--wait-file F]
 * prints "MODE ns_per_op=X". With --wait-file it prints "READY pid=N" and waits until F
 * exists, so qscope can attach to this very process before the loop starts. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int pp_fds[2];
static long pp_iters;

static void *pp_echo(void *arg) {
	(void)arg;
	char c;
	for (long i = 0; i < pp_iters; i++) {
		if (read(pp_fds[1], &c, 1) != 1 || write(pp_fds[1], &c, 1) != 1) break;
	}
	return NULL;
}

/* A real TCP connection over loopback (socketpair would skip the TCP hooks). */
static void tcp_pair(int fds[2]) {
	int l = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	bind(l, (struct sockaddr *)&a, sizeof a);
	listen(l, 1);
	getsockname(l, (struct sockaddr *)&a, &len);
	fds[0] = socket(AF_INET, SOCK_STREAM, 0);
	connect(fds[0], (struct sockaddr *)&a, sizeof a);
	fds[1] = accept(l, NULL, NULL);
	int one = 1;
	setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	close(l);
}

int main(int argc, char **argv) {
	if (argc < 3) {
		fprintf(stderr, "usage: %s getppid|futex|pingpong ITERATIONS [--wait-file F]\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	long n = atol(argv[2]);
	if (argc >= 5 && strcmp(argv[3], "--wait-file") == 0) {
		struct stat st;
		printf("READY pid=%d\n", getpid());
		fflush(stdout);
		while (stat(argv[4], &st) != 0) usleep(10000);
	}
	uint64_t t0, t1;
	if (strcmp(mode, "getppid") == 0) {
		t0 = now_ns();
		for (long i = 0; i < n; i++) syscall(SYS_getppid);
		t1 = now_ns();
	} else if (strcmp(mode, "futex") == 0) {
		static int word;
		t0 = now_ns();
		for (long i = 0; i < n; i++) syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
		t1 = now_ns();
	} else if (strcmp(mode, "pingpong") == 0) {
		pthread_t th;
		char c = 'x';
		tcp_pair(pp_fds);
		pp_iters = n;
		pthread_create(&th, NULL, pp_echo, NULL);
		t0 = now_ns();
		for (long i = 0; i < n; i++) {
			if (write(pp_fds[0], &c, 1) != 1 || read(pp_fds[0], &c, 1) != 1) break;
		}
		t1 = now_ns();
		pthread_join(th, NULL);
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("%s ns_per_op=%.1f\n", mode, (double)(t1 - t0) / (double)n);
	return 0;
}
