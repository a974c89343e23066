#!/bin/busybox sh
# /init of the kernel-matrix guest: mount what qscope needs, run /qscope/guest.sh, print
# its result on the serial console, power off. Everything qscope-specific is in guest.sh.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/qscope
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs dev /dev 2>/dev/null
mkdir -p /dev/shm /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mount -t securityfs securityfs /sys/kernel/security 2>/dev/null
mkdir -p /sys/fs/cgroup && mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
ip link set lo up
# Modules the kernel would autoload through modprobe (sock_diag for TCP and Unix sockets), in
# dependency order.
for m in inet_diag tcp_diag unix_diag; do
    [ -e /lib/qscope-modules/$m.ko ] && insmod /lib/qscope-modules/$m.ko
done
ulimit -l unlimited 2>/dev/null
echo "KM uname $(uname -r)"
cd /tmp
sh /qscope/guest.sh
echo "KM guest-exit $?"
sync
echo o > /proc/sysrq-trigger
sleep 5
