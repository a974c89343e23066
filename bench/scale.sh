#!/usr/bin/env bash
# The collector at scale: CPU at ~10k requests/s, peak RSS and lost events with 10,000
# connections and 10,000 threads, and the wall time to the first full `top` frame.
# Needs root; loopback only; bounded (~1 minute).
#   sudo bench/scale.sh [--seconds S=10] [--out FILE]     (TOP_RUNS=N: runs per top-frame timing)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
SECS=10 OUT=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) SECS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    *) echo "usage: $0 [--seconds S] [--out FILE]" >&2; exit 2;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "scale: needs root (BPF)" >&2; exit 1; }
B=${QSCOPE_BUILD_DIR:-build}
. bench/lib.sh  # bench_cleanup (its own flags stay its own)
# QSCOPE_BENCH_NO_BUILD=1: measure the binaries as built (a shared tree changes under you).
[[ -n ${QSCOPE_BENCH_NO_BUILD:-} ]] || cmake --build "$B" -j2 --target qscope qs_server qs_load >/dev/null
Q=$B/qscope T=$B/targets
bench_begin scale
ulimit -n "$(ulimit -Hn)"   # 10,000 connections per process; root may still lack CAP_SYS_RESOURCE
ready_port() { for _ in $(seq 600); do grep -q 'READY port=' "$1" 2>/dev/null && { sed -n 's/.*READY port=\([0-9]*\).*/\1/p' "$1" | head -1; return; }; sleep 0.05; done; echo "not ready: $1" >&2; exit 1; }
cpu_ns() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{s+=$1} END{print s+0}'; }  # all threads, ns
out() { echo "$*" | tee -a "${OUT:-/dev/null}"; }
: >"${OUT:-/dev/null}"
out "| measurement | result |"
out "|---|---|"

# A recording of PID (issue 18) beside a snapshot of the same target and length, one after
# the other: the file's bytes per tick, and both processes' CPU (user + sys, attach included).
record_vs_snapshot() {
  local pid=$1 label=$2 what cpu_record cpu_snapshot
  TIMEFORMAT='%U %S'
  for what in record snapshot; do
    local args=(snapshot --pid "$pid" --duration "$SECS" --json)
    [[ $what == record ]] && args=(record --pid "$pid" --duration "$SECS" --output "$work/rec.qsrec")
    local t; t=$( { time "$Q" "${args[@]}" >"$work/$what.out" 2>"$work/$what.err"; } 2>&1 )
    printf -v "cpu_$what" '%.2f' "$(echo "$t" | awk '{print $1 + $2}')"
  done
  local ticks bytes
  read -r ticks bytes < <(sed -n 's/.*wrote \([0-9]*\) ticks (\([0-9]*\) bytes).*/\1 \2/p' "$work/record.err")
  out "| recording, $label, ${SECS}s at one tick a second: bytes per tick | $((bytes / ticks)) B ($ticks ticks, $bytes B) |"
  out "| CPU of that recording, beside a snapshot of the same target and length | record ${cpu_record} s, snapshot ${cpu_snapshot} s |"
}

# --- collector CPU at ~10k req/s: 64 connections x 6 ms service time caps the rate near 10.7k/s.
$T/qs_server --port 0 --workers 64 --service-ms 6 >"$work/s1.log" 2>&1 & pids+=($!); s1=$!
p1=$(ready_port "$work/s1.log")
$Q snapshot --pid "$s1" --duration $((SECS + 5)) --json >"$work/q1.json" 2>"$work/q1.err" & qp=$!
# --json prints nothing until the end: attached = the collector holds BPF program fds.
for _ in $(seq 200); do grep -qs '^prog_id' /proc/$qp/fdinfo/* && break; sleep 0.05; done
sleep 2.5  # past tick 1, which loads /proc/kallsyms once (~0.15 s of CPU): steady state only
c0=$(cpu_ns "$qp")
$T/qs_load --host 127.0.0.1 --port "$p1" --connections 64 --duration "$SECS" >"$work/l1.json" 2>/dev/null
c1=$(cpu_ns "$qp")
wait "$qp" || true
rps=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["rps"])' "$work/l1.json")
out "| collector CPU at $(printf %.0f "$rps") req/s (qs_server 64 workers, 6 ms service) | $(python3 -c "print(f'{($c1-$c0)/1e9/$SECS*100:.2f}% of a core')") |"
out "| lost_events in that snapshot | $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("lost_events"))' "$work/q1.json") |"
$T/qs_load --host 127.0.0.1 --port "$p1" --connections 64 --duration $((2 * SECS + 10)) >/dev/null 2>&1 & pids+=($!)
record_vs_snapshot "$s1" "every family, qs_server at ~$(printf %.0f "$rps") req/s"
kill "$s1"

# --- 10,000 threads and 10,000 connections in one target.
$T/qs_server --port 0 --workers 10000 --backlog 16384 >"$work/s2.log" 2>&1 & pids+=($!); s2=$!
p2=$(ready_port "$work/s2.log")
$T/qs_load --host 127.0.0.1 --port "$p2" --connect-only 10000 --hold $((3 * SECS + 25)) >"$work/l2.json" 2>"$work/l2.err" & pids+=($!)
for _ in $(seq 300); do
  n=$(ss -Htn state established "( sport = :$p2 )" | wc -l); [[ $n -ge 10000 ]] && break; sleep 0.1; done
threads=$(awk '/^Threads/{print $2}' /proc/$s2/status)
t0=$(date +%s%N)
$Q snapshot --pid "$s2" --duration "$SECS" --json >"$work/q2.json" 2>"$work/q2.err" & qp=$!
hwm=0; while kill -0 "$qp" 2>/dev/null; do
  h=$(awk '/VmHWM/{print $2}' /proc/$qp/status 2>/dev/null || echo 0); [[ ${h:-0} -gt $hwm ]] && hwm=$h; sleep 0.2; done
wait "$qp" || true
out "| peak RSS (VmHWM) with $threads target threads and $n established connections | $((hwm / 1024)) MiB (snapshot of ${SECS}s, wall $(( ($(date +%s%N)-t0)/1000000 )) ms) |"
out "| lost_events in that snapshot | $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("lost_events"))' "$work/q2.json" 2>/dev/null || echo "no JSON: $(tail -2 "$work/q2.err")") |"

record_vs_snapshot "$s2" "every family, $threads threads and $n connections"

# --- time to the first full top frame against that same large target, and a small one:
# TOP_RUNS runs each (default 10), median and p90 (bench/top_startup.sh).
for tgt in small large; do
  pid=$s2; [[ $tgt == small ]] && { $T/qs_server --port 0 --workers 4 >"$work/s3.log" 2>&1 & pids+=($!); pid=$!; ready_port "$work/s3.log" >/dev/null; }
  r=$(QSCOPE_BUILD_DIR=$B "$root/bench/top_startup.sh" --pid "$pid" --runs "${TOP_RUNS:-10}")
  shown=$(sed -n 1p <<<"$r") exited=$(sed -n 2p <<<"$r")
  n=$(awk '/^Threads/{print $2}' /proc/$pid/status)
  out "| wall time, start to first top frame shown ($tgt target: $n threads) | ${shown#*: } |"
  out "| wall time, start to exit after it (detaching included) ($tgt target: $n threads) | ${exited#*: } |"
done
