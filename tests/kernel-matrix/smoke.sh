#!/bin/sh
# The kernel-matrix smoke subset, run by busybox sh inside the guest (vm.sh, guest-init.sh).
# Each case starts the real test targets, runs the real qscope, and prints qscope's JSON and
# the oracles between "KM-BEGIN <case>.<what>" and "KM-END" lines on the serial console:
# the targets' own counters, /proc/net/tcp, /proc/PID/task/*/syscall. The host-side test
# (kernel_matrix_test.cpp) parses the log and asserts, with the tolerances of the host's
# integration tests (tests/integration/{requests,downstream,waits}_test.cpp).
# Ports 28100-28299. Everything here must exit; the guest powers off after.
PATH=/qscope:/bin:/sbin

block() { # name file
    echo "KM-BEGIN $1"
    cat "$2" 2>/dev/null
    echo
    echo "KM-END $1"
}

# "KM step CASE UPTIME": where the guest is, for a guest stopped by vm.sh's limit (the host's test
# names the last one) and for the cases' durations under TCG.
step() { echo "KM step $1 $(cut -d' ' -f1 /proc/uptime)"; }

# Waits for "READY" in a target's output file.
ready() {
    i=0
    while ! grep -q READY "$1" 2>/dev/null; do
        i=$((i + 1)); [ $i -gt 200 ] && { echo "KM note: $1 never READY"; return 1; }
        sleep 0.1
    done
}

# qscope has attached once it holds BPF links (then 0.5 s for its seeding walks). Looked at every
# 0.3 s: each look is two processes, whose guest CPU the attach itself needs under TCG.
attached() {
    i=0
    while [ "$(ls -l /proc/$1/fd 2>/dev/null | grep -c bpf_link)" -lt 3 ]; do
        i=$((i + 1)); [ $i -gt 200 ] && { echo "KM note: qscope $1 never attached"; return 1; }
        kill -0 "$1" 2>/dev/null || return 1
        sleep 0.3
    done
    sleep 0.5
}

# Threads of a process: "comm syscall-number" per line (the /proc oracle for waits).
tasks() {
    for t in /proc/$1/task/*; do echo "$(cat $t/comm) $(cut -d' ' -f1 $t/syscall)"; done
}

# Whether PID runs (a zombie has exited; it waits to be reaped).
running() {
    [ -r /proc/$1/stat ] || return 1
    read -r _ _ st _ < /proc/$1/stat 2>/dev/null
    [ "$st" != Z ]
}

# Waits up to SECONDS for PID to exit, else names it with its threads' kernel waits ("KM hung",
# which fails the host's test) and kills it: a process that hangs is named, where it would
# otherwise hold the guest until vm.sh's limit. Looked at every 0.3 s, as attached() does: a
# look is a `sleep` process, whose guest CPU the snapshot being waited for needs under TCG.
# Returns PID's exit status.
#   reap PID SECONDS
reap() {
    i=0
    while running $1; do
        i=$((i + 3))
        if [ $i -gt $(($2 * 10)) ]; then
            echo "KM hung $(cat /proc/$1/comm 2>/dev/null) $1 in $c after $2 s"
            for t in /proc/$1/task/*; do
                echo "KM hung-task $(cat $t/comm 2>/dev/null) ${t##*/} wchan=$(cat $t/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"
            done
            kill -9 $1 2>/dev/null
            break
        fi
        sleep 0.3
    done
    wait $1 2>/dev/null
}

# SIGTERM to every PID, then each has 30 s to exit.
stop() { for p in "$@"; do kill "$p" 2>/dev/null; done; for p in "$@"; do reap "$p" 30; done; }

# Runs `qs_server SERVER-ARGS` (its counters in /dev/shm/CASE.json) and `qscope snapshot` on it
# for SECONDS (plus $qflags), with QSCOPE_SOCK_ATTACH=MODE unless MODE is auto; returns once qscope has
# attached, leaving $srv and $q. The shape every case shares: server, qscope, then the load.
#   attach_case CASE MODE SECONDS SERVER-ARGS...
attach_case() {
    c=$1; mode=$2; seconds=$3; shift 3
    step $c
    env=""
    [ "$mode" != auto ] && env="QSCOPE_SOCK_ATTACH=$mode"
    rm -f /dev/shm/$c.json
    qs_server --counters-file /dev/shm/$c.json "$@" > /tmp/srv.out 2>&1 &
    srv=$!
    ready /tmp/srv.out
    env $env qscope snapshot --pid $srv --duration $seconds --json --no-threads $qflags > /tmp/snap.json 2> /tmp/snap.err &
    q=$!
    attached $q
}

# Waits for qscope's snapshot to end and prints its exit status.
snapshot_done() {
    reap $q 90
    echo "KM $1.qscope-exit $?"
}

# Stops PIDS, prints qscope's JSON and stderr and the server's counters.
#   finish_case CASE PIDS...
finish_case() {
    c=$1; shift
    stop "$@"
    block $c.snapshot /tmp/snap.json
    block $c.stderr /tmp/snap.err
    block $c.counters /dev/shm/$c.json
}

# Sets KM_MODES (vm.sh, from QSCOPE_KM_MODES): the attach types the socket cases run under.
[ -f /qscope/env ] && . /qscope/env
modes=${KM_MODES:-auto kprobe}

t0=$(cut -d' ' -f1 /proc/uptime)
qscope check > /tmp/check.txt 2>&1
echo "KM check-exit $?"
block check /tmp/check.txt
# The kernel's own list of its sock tracepoints: which ones the default path can use.
ls /sys/kernel/tracing/events/sock > /tmp/tp.txt 2>&1
block sock-tracepoints /tmp/tp.txt
# ... and of the poll syscalls' tracepoints (the event-loop hooks).
ls /sys/kernel/tracing/events/syscalls | grep -E '^sys_(enter|exit)_(epoll_wait|epoll_pwait|epoll_pwait2|poll|ppoll|select|pselect6|io_uring_enter)$' > /tmp/polls.txt
block poll-tracepoints /tmp/polls.txt

# ---- requests: in flight max, completed, latency vs qs_server's counters ------------------
# (requests_test "in flight max, completions and latency"); run once per attach type asked.
for mode in $modes; do
    attach_case requests-$mode $mode 7 --port 28110 --workers 6 --service-ms 50
    qs_load --host 127.0.0.1 --port 28110 --connections 10 --duration 3 > /tmp/load.json 2>&1
    snapshot_done requests-$mode
    finish_case requests-$mode $srv
    block requests-$mode.load /tmp/load.json
done

# ---- kprobes: a kretprobe's return slots; the returns it misses are counted --------------------
# Every thread inside tcp_recvmsg, a blocked read included, holds one of the kretprobe's return
# slots; past them a return is not seen. 36 workers: 12 hold connections that sent one request
# and then nothing (each worker blocked in a read for the whole case), 24 serve 24 clients.
# With qscope's slots (4096: engine/bpf_util.h attach_link) nothing is missed. With tracefs's
# kprobe_events hidden behind /dev/null, qscope cannot make its own event and falls back to
# libbpf's attach at the kernel's default, max(10, 2 x CPUs): the 12 held reads alone take the
# 10 slots, returns are missed, and qscope counts them among its lost events (sock.bpf.c
# io_enter) with the slots it got as their cause.
case " $modes " in *" kprobe "*)
    for slots in 4096 default; do
        c=kretprobe-$slots
        [ $slots = default ] && mount -o bind /dev/null /sys/kernel/tracing/kprobe_events
        attach_case $c kprobe 6 --port 28120 --workers 36 --service-ms 20
        qs_load --host 127.0.0.1 --port 28120 --connect-only 12 --hold 20 > /dev/null 2>&1 &
        held=$!
        sleep 0.5
        cp /sys/kernel/tracing/kprobe_events /tmp/kprobe_events.txt 2>/dev/null  # qscope's, while attached
        qs_load --host 127.0.0.1 --port 28120 --connections 24 --duration 3 > /tmp/load.json 2>&1
        snapshot_done $c
        stop $held
        finish_case $c $srv
        [ $slots = default ] && umount /sys/kernel/tracing/kprobe_events
        block $c.kprobe-events /tmp/kprobe_events.txt
    done
    # qscope removed its tracefs events at exit.
    cat /sys/kernel/tracing/kprobe_events > /tmp/kprobe_events.txt 2>&1
    block kretprobe-after.kprobe-events /tmp/kprobe_events.txt
    echo "KM kretprobe-ran 1" ;;
esac

# ---- connector queue: connections and unread requests vs /proc/net/tcp --------------------
# 12 keep-alive clients, 4 workers that each keep one connection: 8 connections wait in the
# server's own queue with their request unread. qscope attaches first, so the unread ones are
# counted from arrivals (sk_data_ready or its fallback), not from the seeding walk. The syscall
# path has no way into arrivals (no syscall sees them), so it is not run here. The oracle is
# read after qscope's last tick: a worker between its answer and its next read at either instant
# moves a request between unread and in flight. A second's service keeps those moments rare
# (at 300 ms a 6.1 guest once read 10 unread and 2 in flight against the server's 8 and 4).
for mode in $modes; do
    [ "$mode" = syscall ] && continue
    attach_case unread-$mode $mode 4 --port 28130 --workers 4 --service-ms 1000
    qs_load --host 127.0.0.1 --port 28130 --connections 12 --duration 8 > /tmp/load.json 2>&1 &
    ld=$!
    snapshot_done unread-$mode
    # The oracle at the snapshot's end, before the clients go.
    cat /proc/net/tcp /proc/net/tcp6 > /tmp/tcp.txt 2>/dev/null
    finish_case unread-$mode $ld $srv
    block unread-$mode.proc-net-tcp /tmp/tcp.txt
done

# ---- downstream: busy vs the server's pool count, calls vs its completions ----------------
# (downstream_test): 3 pooled connections to a peer that answers after 20 ms. With --tls, so the
# libssl probes and the TLS and HTTP/2-inside-TLS paths they switch on pass this kernel's
# verifier too (qs_server has no libssl: its numbers are unchanged).
qs_downstream --port 28210 --delay-ms 20 > /tmp/ds.out 2>&1 &
ds=$!
ready /tmp/ds.out
qflags=--tls
attach_case downstream auto 7 --port 28211 --workers 6 --pool 3 --downstream 127.0.0.1:28210
qflags=
qs_load --host 127.0.0.1 --port 28211 --connections 6 --duration 3 > /tmp/load.json 2>&1
snapshot_done downstream
finish_case downstream $srv $ds

# ---- waits: the pool gate's futex waiters vs the server's count and /proc -----------------
# (waits_test "pool gate"): 8 workers, a pool of 3, 16 clients: 5 workers wait at the gate.
c=waits
step $c
rm -f /dev/shm/w.json
qs_downstream --port 28220 --delay-ms 100 > /tmp/ds.out 2>&1 &
ds=$!
ready /tmp/ds.out
qs_server --port 28221 --workers 8 --pool 3 --downstream 127.0.0.1:28220 --counters-file /dev/shm/w.json \
    > /tmp/srv.out 2>&1 &
srv=$!
ready /tmp/srv.out
qs_load --host 127.0.0.1 --port 28221 --connections 16 --duration 30 > /tmp/load.json 2>&1 &
ld=$!
sleep 2
cp /dev/shm/w.json /tmp/c0.json
tasks $srv > /tmp/tasks0.txt
qscope snapshot --pid $srv --duration 3 --json > /tmp/snap.json 2> /tmp/snap.err
echo "KM $c.qscope-exit $?"
cp /dev/shm/w.json /tmp/c1.json
tasks $srv > /tmp/tasks1.txt
stop $ld $srv $ds
block $c.snapshot /tmp/snap.json
block $c.stderr /tmp/snap.err
block $c.counters0 /tmp/c0.json
block $c.counters1 /tmp/c1.json
block $c.tasks0 /tmp/tasks0.txt
block $c.tasks1 /tmp/tasks1.txt

# ---- one exporter, two targets: the hooks they share on this kernel ----------------------
# (reattach_test "two services"): both servers call one downstream, B connecting per request,
# so its connects, arrivals and closes reach its programs through A's where the exporter shares
# the hooks (bpf/dispatch.bpf.c): the tracepoints, or before them the kernel functions behind
# them, by the way qscope takes (fexit/fentry where it loads) and, when asked, by kprobes. Not
# the syscall exits (each target's own there), nor fentry or kprobes forced where the
# tracepoints are (6.1 proves those ways).
export_modes=auto
if [ ! -d /sys/kernel/tracing/events/sock/sock_recv_length ]; then
    for m in $modes; do [ "$m" = kprobe ] && export_modes="auto kprobe"; done
fi
echo "KM export-modes $export_modes"

# The programs a process's BPF links attach, "count name" per line: each link's fdinfo names its
# program's id (after its link_id line), and one bpftool listing names the ids. Two processes in
# all, not a few per fd: under TCG each costs the guest ~0.1 s that the exporter's ticks need.
linked() {
    awk 'FNR == 1 { link = 0 } /^link_id:/ { link = 1 } /^prog_id:/ && link { print $2 }' /proc/$1/fdinfo/* \
        2>/dev/null > /tmp/link-progs.txt
    bpftool prog show 2>/dev/null |
        awk 'NR == FNR { links[$1]++; next }
             /^[0-9]+:/ { id = $1; sub(":", "", id)
                          for (i = 1; i < NF; i++) if ($i == "name" && id in links) for (k = 0; k < links[id]; k++) print $(i + 1) }' \
            /tmp/link-progs.txt - | sort | uniq -c
}

for mode in $export_modes; do
    env=""
    [ "$mode" != auto ] && env="QSCOPE_SOCK_ATTACH=$mode"
    c=export-$mode
    step $c
    # Workers and clients of A and B. Under kprobes, fewer: sized when each thread blocked in a
    # read held one of the kernel's 10 default return slots; qscope now asks 4,096 (the case
    # above).
    aw=4; ac=4; bw=2; bc=4
    [ "$mode" = kprobe ] && { aw=2; ac=2; bw=1; bc=1; }
    qs_downstream --port 28230 > /tmp/ds.out 2>&1 &
    ds=$!
    ready /tmp/ds.out
    rm -f /dev/shm/ea.json /dev/shm/eb.json
    qs_server --port 28231 --workers $aw --downstream 127.0.0.1:28230 --counters-file /dev/shm/ea.json > /tmp/sa.out 2>&1 &
    sa=$!
    qs_server --port 28232 --workers $bw --service-ms 5 --downstream 127.0.0.1:28230 --downstream-per-request \
        --counters-file /dev/shm/eb.json > /tmp/sb.out 2>&1 &
    sb=$!
    ready /tmp/sa.out
    ready /tmp/sb.out
    # --ring: the last ticks, written on SIGUSR1, say which family lost what (/metrics has the total).
    rm -f /tmp/ring-*
    env $env qscope export --target a=pid:$sa --target b=pid:$sb --listen 127.0.0.1:28290 --ring 120s -o /tmp/ring \
        > /dev/null 2> /tmp/exp.err &
    ex=$!
    i=0
    while [ "$(wget -q -O - http://127.0.0.1:28290/metrics 2>/dev/null | grep -c '^qscope_up{service="[ab]"} 1')" -lt 2 ]; do
        i=$((i + 1)); [ $i -gt 200 ] && { echo "KM note: the exporter's targets never up"; break; }
        sleep 0.3
    done
    step $c.up
    qs_load --host 127.0.0.1 --port 28231 --connections $ac --duration 3 > /tmp/la.json 2>&1 &
    la=$!
    qs_load --host 127.0.0.1 --port 28232 --connections $bc --duration 3 > /tmp/lb.json 2>&1
    reap $la 30
    # Until both services' snapshots were taken after the load ended: a guest's ticks take seconds
    # (the sanitized build under TCG), so the one served just after may predate it.
    tend=$(cut -d' ' -f1 /proc/uptime)
    i=0
    while :; do
        sleep 1
        wget -q -O - http://127.0.0.1:28290/metrics > /tmp/metrics.txt 2>&1
        since=$(awk -v now="$(cut -d' ' -f1 /proc/uptime)" -v end="$tend" 'BEGIN { print now - end - 0.5 }')
        fresh=$(awk -v since="$since" '/^qscope_snapshot_age_seconds[{]/ && $2 < since { n++ } END { print n + 0 }' /tmp/metrics.txt)
        [ "$fresh" -ge 2 ] && { step $c.fresh; break; }
        i=$((i + 1)); [ $i -gt 60 ] && { echo "KM note: the exporter served no snapshot taken after the load"; break; }
    done
    linked $ex > /tmp/linked.txt
    kill -USR1 $ex
    i=0
    while [ "$(ls /tmp/ring-a-* /tmp/ring-b-* 2>/dev/null | wc -l)" -lt 2 ]; do
        i=$((i + 1)); [ $i -gt 100 ] && { echo "KM note: the exporter wrote no ring"; break; }
        sleep 0.1
    done
    sleep 0.5
    step $c.ring
    stop $ex $sa $sb $ds
    step $c.stopped
    for s in a b; do
        qscope snapshot --replay "$(ls /tmp/ring-$s-* 2>/dev/null | head -1)" --json > /tmp/replay-$s.json 2>&1
    done
    step $c.replayed
    block $c.metrics /tmp/metrics.txt
    block $c.stderr /tmp/exp.err
    block $c.counters-a /dev/shm/ea.json
    block $c.counters-b /dev/shm/eb.json
    block $c.linked /tmp/linked.txt
    block $c.replay-a /tmp/replay-a.json
    block $c.replay-b /tmp/replay-b.json
done

t1=$(cut -d' ' -f1 /proc/uptime)
echo "KM smoke-seconds $t0 $t1"
