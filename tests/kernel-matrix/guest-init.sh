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
# A guest that would outlive vm.sh's limit says first what it is stuck on: every task of every
# process, its state, kernel wait channel and syscall (the host's test prints this block).
[ -f /qscope/env ] && . /qscope/env
if [ -n "$KM_TIMEOUT" ]; then
    (
        sleep $((KM_TIMEOUT - 60))
        echo "KM-BEGIN watchdog"
        echo "uptime $(cut -d' ' -f1 /proc/uptime): these tasks were still there"
        for t in /proc/[0-9]*/task/*; do
            [ -e "${t%/task/*}/exe" ] || continue  # not a kernel thread
            echo "$(cat $t/comm 2>/dev/null) ${t#/proc/} $(awk '{ print $3 }' $t/stat 2>/dev/null)" \
                "wchan=$(cat $t/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"
        done
        echo "KM-END watchdog"
    ) &
fi
sh /qscope/guest.sh
echo "KM guest-exit $?"
sync
echo o > /proc/sysrq-trigger
sleep 5
