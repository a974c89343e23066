/* A copied user stack plus registers, unwound in user space with DWARF CFI (libdw), as
 * `perf --call-graph dwarf` does. Why: Debian's glibc has no frame pointers, so a
 * frame-pointer stack taken inside a libc wrapper (futex, read) stops after one frame and
 * never reaches the application. Produced by sched.bpf.c (waits) and carrier.bpf.c
 * (stalls); consumed by collector/symbolizer. Copying costs ~1-2 us: producers sample or
 * cache, never copy on every event. */
#ifndef QSCOPE_USTACK_H
#define QSCOPE_USTACK_H

#define QS_USTACK_BYTES 8192

/* x86-64 DWARF register numbers: the index into regs[] is the DWARF regno. */
enum qs_dwarf_reg {
	QS_REG_RAX = 0, QS_REG_RDX, QS_REG_RCX, QS_REG_RBX, QS_REG_RSI, QS_REG_RDI,
	QS_REG_RBP, QS_REG_RSP, QS_REG_R8, QS_REG_R9, QS_REG_R10, QS_REG_R11,
	QS_REG_R12, QS_REG_R13, QS_REG_R14, QS_REG_R15, QS_REG_RIP, QS_NREGS
};

struct qs_ustack {
	__u64 regs[QS_NREGS];	/* user registers at the blocking syscall's entry */
	__u32 size;		/* valid bytes in data, copied from regs[QS_REG_RSP] upward */
	__u32 tid;
	__u8 data[QS_USTACK_BYTES];
};

#endif
