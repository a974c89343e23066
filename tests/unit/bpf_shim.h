// What a unit test needs before it includes a BPF header (bpf/*.h) as C++: the kernel's integer
// types and the inlining attribute, which the BPF build gets from vmlinux.h and libbpf.
#pragma once
#include <linux/types.h>

#ifndef __always_inline
#define __always_inline inline
#endif
