// PLACEHOLDER so the BPF build path is exercised before the first real probe family lands.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
