#!/usr/bin/env bash
# Per-connection state: a hash keyed by the socket (bpf/sock.bpf.c's `conns`) against
# socket-local storage (BPF_MAP_TYPE_SK_STORAGE), side by side on one hook in one run. Both
# programs of bench/conn_state.bpf.c, and an empty one, run on every read on the host
# (tp_btf/sock_recv_length) while wrk drives a static nginx on loopback; each finds or
# creates the socket's struct qs_conn and writes to it. The kernel's own accounting
# (kernel.bpf_stats_enabled) gives each program's ns per run; rounds alternate the two
# programs' order on the hook. Prints, per order, each program's median ns/run with its range
# over rounds, and the storage-less-hash difference per round. Needs root; loopback; bounded.
#
#   sudo bench/conn_state.sh [--rounds N=5] [--seconds S=5]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
bench_args conn_state "$@"
bench_build qs_floor
bench_begin connstate
sysctl -qw kernel.bpf_stats_enabled=1
port=28492
bench_nginx "$work" "$port"
sleep 0.3

results=$work/results
for round in $(seq "$ROUNDS"); do
  for order in hash_first storage_first; do
    "$B/bench/qs_floor" "$B/bench/conn_state_$order.bpf.o" >"$work/floor.out" 2>&1 &
    floor=$!
    pids+=("$floor")
    for _ in $(seq 100); do grep -q READY "$work/floor.out" && break; sleep 0.05; done
    grep -q READY "$work/floor.out" || { cat "$work/floor.out" >&2; exit 1; }
    before=$(prog_stats "$floor")
    wrk -t1 -c8 -d"${SECS}s" "http://127.0.0.1:$port/" >/dev/null 2>&1
    after=$(prog_stats "$floor")
    kill "$floor"; wait "$floor" 2>/dev/null || true
    prog_delta "$before" "$after" conn_ | sed "s/^/$round $order /" >>"$results"
  done
done

echo "conn_state: every read on the host (tp_btf/sock_recv_length) under wrk -c8 against static nginx,"
echo "$ROUNDS rounds of ${SECS}s per order, ns per run (median [min..max]); Linux $(uname -r), load $(cut -d' ' -f1 /proc/loadavg)"
python3 - "$results" <<'PY'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
def show(vals): return "%.1f [%.1f..%.1f]" % (st.median(vals), min(vals), max(vals))
for order in ("hash_first", "storage_first"):
    print(" ", order.replace("_", " ") + ":")
    for prog in ("conn_empty", "conn_by_hash", "conn_by_storage"):
        v = [float(r[3]) for r in rows if r[1] == order and r[2] == prog]
        runs = sum(int(r[4]) for r in rows if r[1] == order and r[2] == prog)
        if v: print("    %-16s %s  (%d runs)" % (prog, show(v), runs))
    d = {}
    for r in rows:
        if r[1] == order and r[2] in ("conn_by_hash", "conn_by_storage"): d.setdefault(r[0], {})[r[2]] = float(r[3])
    diffs = [x["conn_by_storage"] - x["conn_by_hash"] for x in d.values() if len(x) == 2]
    if diffs: print("    storage - hash   %s ns per read" % show(diffs))
PY
