/* The syscalls qscope reasons about: x86-64 numbers and their classes. ONE home for these
 * kernel facts, included by the BPF programs and by the C++ syscall table
 * (collector/model/syscall_table.cpp; tests/unit/syscalls_test.cpp checks that they agree).
 *
 * Numbers are the 64-bit ABI's (linux/arch/x86/entry/syscalls/syscall_64.tbl): what
 * pt_regs->orig_ax and /proc/PID/task/TID/syscall show for a 64-bit target.
 */
#ifndef QSCOPE_SYSCALLS_H
#define QSCOPE_SYSCALLS_H

/* X(name, number): only the syscalls some rule below names; the full name table lives in
 * C++. QS_NR_read, QS_NR_futex, ... are the constants. */
#define QS_SYSCALLS(X)                                                                    \
	X(read, 0) X(write, 1) X(poll, 7) X(ioctl, 16) X(pread64, 17) X(pwrite64, 18)       \
	X(readv, 19) X(writev, 20) X(select, 23) X(pause, 34) X(nanosleep, 35)               \
	X(sendfile, 40) X(connect, 42) X(accept, 43) X(sendto, 44) X(recvfrom, 45)           \
	X(sendmsg, 46) X(recvmsg, 47) X(wait4, 61) X(fcntl, 72) X(flock, 73) X(fsync, 74)    \
	X(fdatasync, 75) X(rt_sigtimedwait, 128) X(rt_sigsuspend, 130) X(readahead, 187)     \
	X(futex, 202) X(io_getevents, 208) X(restart_syscall, 219) X(clock_nanosleep, 230)   \
	X(epoll_wait, 232) X(waitid, 247) X(openat, 257) X(pselect6, 270) X(ppoll, 271)      \
	X(splice, 275) X(tee, 276) X(sync_file_range, 277) X(vmsplice, 278)                  \
	X(epoll_pwait, 281) X(fallocate, 285) X(accept4, 288) X(preadv, 295) X(pwritev, 296) \
	X(recvmmsg, 299) X(sendmmsg, 307) X(copy_file_range, 326) X(preadv2, 327)            \
	X(pwritev2, 328) X(io_uring_enter, 426) X(epoll_pwait2, 441) X(futex_waitv, 449)     \
	X(futex_wait, 455)

#define QS_NR_ENUMERATOR(name, nr) QS_NR_##name = nr,
enum qs_syscall_nr { QS_SYSCALLS(QS_NR_ENUMERATOR) };
#undef QS_NR_ENUMERATOR

/* What a thread blocked in the syscall is waiting for. One class per syscall; the rules
 * (carrier idle, waiting for work, stall reasons) are unions of classes, never lists. */
enum qs_sys_class {
	QS_SC_OTHER = 0,	/* none of the below: mmap, ioctl, flock, ... */
	QS_SC_FUTEX,		/* a lock, condvar, park: a gate or an idle pool thread */
	QS_SC_EPOLL,		/* an event loop waiting for any of its fds */
	QS_SC_POLL,		/* readiness of the fds of one call: a blocking read with a timeout
				 * (the JDK's socket reads poll() first) */
	QS_SC_ACCEPT,		/* a listener waiting for the next connection */
	QS_SC_RECV,		/* input: socket or file read */
	QS_SC_SEND,		/* output: socket or file write */
	QS_SC_CONNECT,		/* an outbound handshake */
	QS_SC_FILE,		/* storage: open, sync, in-kernel copies */
	QS_SC_AIO,		/* completions of asynchronous I/O */
	QS_SC_SLEEP,		/* a timed sleep */
	QS_SC_PROCESS,		/* a signal or a child process */
};

static __always_inline int qs_sys_class(long long nr)
{
	switch (nr) {
	case QS_NR_futex:
	case QS_NR_futex_waitv:
	case QS_NR_futex_wait:
		return QS_SC_FUTEX;
	case QS_NR_epoll_wait:
	case QS_NR_epoll_pwait:
	case QS_NR_epoll_pwait2:
		return QS_SC_EPOLL;
	case QS_NR_poll:
	case QS_NR_ppoll:
	case QS_NR_select:
	case QS_NR_pselect6:
		return QS_SC_POLL;
	case QS_NR_accept:
	case QS_NR_accept4:
		return QS_SC_ACCEPT;
	case QS_NR_read:
	case QS_NR_readv:
	case QS_NR_pread64:
	case QS_NR_preadv:
	case QS_NR_preadv2:
	case QS_NR_recvfrom:
	case QS_NR_recvmsg:
	case QS_NR_recvmmsg:
		return QS_SC_RECV;
	case QS_NR_write:
	case QS_NR_writev:
	case QS_NR_pwrite64:
	case QS_NR_pwritev:
	case QS_NR_pwritev2:
	case QS_NR_sendto:
	case QS_NR_sendmsg:
	case QS_NR_sendmmsg:
	case QS_NR_sendfile:
		return QS_SC_SEND;
	case QS_NR_connect:
		return QS_SC_CONNECT;
	case QS_NR_openat:
	case QS_NR_fsync:
	case QS_NR_fdatasync:
	case QS_NR_splice:
	case QS_NR_copy_file_range:
		return QS_SC_FILE;
	case QS_NR_io_getevents:
	case QS_NR_io_uring_enter:
		return QS_SC_AIO;
	case QS_NR_nanosleep:
	case QS_NR_clock_nanosleep:
		return QS_SC_SLEEP;
	case QS_NR_pause:
	case QS_NR_rt_sigsuspend:
	case QS_NR_rt_sigtimedwait:
	case QS_NR_wait4:
	case QS_NR_waitid:
	case QS_NR_restart_syscall:
		return QS_SC_PROCESS;
	default:
		return QS_SC_OTHER;
	}
}

/* Carrier idle: where a generic runtime (tokio, libuv, Go-like pools) parks a worker that
 * has no task. Anything else a carrier blocks in holds the task it runs: a stall. */
static __always_inline int qs_sys_carrier_idle(long long nr)
{
	int c = qs_sys_class(nr);
	return c == QS_SC_FUTEX || c == QS_SC_EPOLL;
}

/* A Go M with no goroutine to run: parked on its note in futex (runtime.stopm, notesleep,
 * templateThread), the netpoller in epoll_pwait, or sleeping in nanosleep (sysmon's usleep,
 * a spinning M's usleep(3) in runqgrab). A goroutine's own sleeps are runtime timers, never
 * a nanosleep, so the sleep class holds no goroutine here. */
static __always_inline int qs_sys_go_idle(long long nr)
{
	return qs_sys_carrier_idle(nr) || qs_sys_class(nr) == QS_SC_SLEEP;
}

/* Waiting for work (the verdict): what a thread sits in when it holds no request. Wider
 * than carrier idle because it judges any thread, and sees only waits on no socket and no
 * file (those are downstream calls or file I/O, judged by their resource):
 *  - read and friends on such an fd are a pipe, eventfd or tty: an event loop's wakeup or
 *    a console, never a request's wait;
 *  - sleeps are housekeeping and timer threads between rounds;
 *  - poll/select, accept, signal and child waits, AIO completions: a thread idle until the
 *    next event. */
static __always_inline int qs_sys_waiting_for_work(long long nr)
{
	switch (qs_sys_class(nr)) {
	case QS_SC_FUTEX:
	case QS_SC_EPOLL:
	case QS_SC_POLL:
	case QS_SC_ACCEPT:
	case QS_SC_RECV:
	case QS_SC_AIO:
	case QS_SC_SLEEP:
	case QS_SC_PROCESS:
		return 1;
	default:
		return 0;
	}
}

/* What a blocking syscall's first argument is, so the wait's resource can be named. One
 * classification for both sides: bpf/sched.bpf.c keys waits by it, the collector names
 * them by it (collector/sys/syscall_names.cpp). */
enum qs_arg0_kind { QS_ARG0_NONE = 0, QS_ARG0_FD, QS_ARG0_FUTEX, QS_ARG0_FUTEX_VEC };

static __always_inline int qs_sys_arg0_kind(long long nr)
{
	switch (nr) {
	case QS_NR_read:
	case QS_NR_write:
	case QS_NR_ioctl:
	case QS_NR_pread64:
	case QS_NR_pwrite64:
	case QS_NR_readv:
	case QS_NR_writev:
	case QS_NR_sendfile:	/* out_fd */
	case QS_NR_connect:
	case QS_NR_accept:
	case QS_NR_sendto:
	case QS_NR_recvfrom:
	case QS_NR_sendmsg:
	case QS_NR_recvmsg:
	case QS_NR_fcntl:	/* F_SETLKW */
	case QS_NR_flock:
	case QS_NR_fsync:
	case QS_NR_fdatasync:
	case QS_NR_readahead:
	case QS_NR_epoll_wait:
	case QS_NR_splice:	/* fd_in */
	case QS_NR_tee:
	case QS_NR_sync_file_range:
	case QS_NR_vmsplice:
	case QS_NR_epoll_pwait:
	case QS_NR_fallocate:
	case QS_NR_accept4:
	case QS_NR_preadv:
	case QS_NR_pwritev:
	case QS_NR_recvmmsg:
	case QS_NR_sendmmsg:
	case QS_NR_preadv2:
	case QS_NR_pwritev2:
	case QS_NR_epoll_pwait2:
		return QS_ARG0_FD;
	case QS_NR_futex:
	case QS_NR_futex_wait:	/* futex2 */
		return QS_ARG0_FUTEX;
	case QS_NR_futex_waitv:	/* arg0 is an array of waiters */
		return QS_ARG0_FUTEX_VEC;
	default:
		return QS_ARG0_NONE;
	}
}

#endif
