#!/usr/bin/env bash
# qscope's cost, measured side by side in one run: interleaved rounds of the same load with
# and without qscope attached, reported as ratios with their spread (never absolute times
# compared across runs). Needs root. Loopback only; bounded.
#
#   sudo bench/overhead.sh [--rounds N=5] [--seconds S=5] [--out FILE] [--parts abc]
#
# (a) wrk → nginx serving a static 2-byte response (~4 us/request, the worst case):
#     baseline | floor | qscope attached to another process | qscope attached to nginx |
#     qscope --no-requests attached to nginx
# (b) the bundled qs_server with a realistic 2 ms service time under qs_load
# (c) syscall micro-benchmarks: getppid, futex wake, loopback ping-pong; baseline |
#     floor | qscope attached elsewhere (filtered-out cost) | qscope attached to the benchmark
# (a) also runs the floor: an empty BPF program on each of the same hooks (bench/floor.bpf.c),
#     what any tool attached there pays before doing anything.
# plus, from the kernel's own accounting (kernel.bpf_stats_enabled), each program's average
# ns per invocation and invocations/s for the floor, qscope filtered out and qscope targeted,
# and the collector's CPU % and RSS. bpf_stats is ON only in that separate window: its two
# clock reads per program run would otherwise be part of every throughput ratio.
# (d) the target in a cgroup of its own (created and removed here), a second nginx outside it:
#     wrk → the unobserved nginx, then wrk → the target; each with no qscope, qscope
#     --scope global and qscope --scope cgroup attached to the target (docs/kernel.md "Scoped
#     to the target's cgroup"). Not part of the default run: --parts abcd.
# (e) several targets in one exporter: wrk → nginx, which no exporter observes, with no
#     qscope, `qscope export` of one target and of three (idle qs_servers). Each target loads
#     its own probes (sharing them is not built, docs/design.md), so what an exporter costs
#     the rest of the host grows with its targets: this measures by how much. Not part of
#     the default run: --parts e.
#   --parts abc picks parts (a), (b), (c), (d), (e); the report covers what ran.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
bench_args bench "$@"
bench_build qscope qs_server qs_load qs_syscall_bench qs_floor
Q=$B/qscope T=$B/targets
bench_begin bench
sysctl -qw kernel.bpf_stats_enabled=0
results=$work/results.tsv
: >"$results"

ready_port() { for _ in $(seq 200); do grep -q 'READY port=' "$1" 2>/dev/null && { sed -n 's/.*READY port=\([0-9]*\).*/\1/p' "$1" | head -1; return; }; sleep 0.05; done; echo "not ready: $1" >&2; exit 1; }

# --- peers -------------------------------------------------------------------------------
bench_nginx "$work" 25080
sleep 0.5
nginx_worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
$T/qs_server --port 0 --workers 2 >"$work/idle.log" 2>&1 & pids+=($!); idle_pid=$!
ready_port "$work/idle.log" >/dev/null

# Starts qscope attached to $1 and waits until its probes are loaded; echoes its pid.
attach() {
  local log=$work/qscope-$RANDOM.log
  $Q snapshot --pid "$1" --duration 3600 "${@:2}" >"$log" 2>&1 &
  local qp=$!
  for _ in $(seq 200); do grep -q 'observing PID' "$log" 2>/dev/null && break; kill -0 $qp 2>/dev/null || { cat "$log" >&2; exit 1; }; sleep 0.05; done
  sleep 0.5   # first tick: seeding of existing sockets/threads is done
  echo "$qp $log" >>"$work/attached"
  echo $qp
}
# Starts the empty programs of bench/floor.bpf.c; echoes the loader's pid.
attach_floor() {
  local log=$work/floor-$RANDOM.log
  $B/bench/qs_floor "$B/bench/floor.bpf.o" >"$log" 2>&1 &
  local fp=$!
  for _ in $(seq 200); do grep -q READY "$log" 2>/dev/null && break; kill -0 $fp 2>/dev/null || { cat "$log" >&2; exit 1; }; sleep 0.05; done
  echo $fp
}
# SIGINT must end a snapshot promptly; the time it takes is recorded (stop_ms). attach() ran
# in a $(...) subshell, so qscope is not this shell's child and `wait` cannot see it: poll
# until it is gone or a zombie (its new parent reaps it when it will). Its report then names
# any lost events (lost_events).
running() { local st; st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1; [[ -n $st && $st != Z ]]; }
# SIGINT, then wait (at most 10 s) until it is gone: its BPF links go with it, before the next
# condition starts. Used for qs_floor too, which attach_floor also starts in a subshell.
stop_proc() { kill -INT "$1" 2>/dev/null || true; for _ in $(seq 2000); do running "$1" || break; sleep 0.005; done; }
detach() {
  local t0 log lost; t0=$(date +%s%N)
  stop_proc "$1"
  record stop_ms any 0 $(( ($(date +%s%N)-t0)/1000000 ))
  log=$(awk -v p="$1" '$1 == p {print $2}' "$work/attached")
  lost=$(sed -n 's/^LOST EVENTS \([0-9]*\).*/\1/p' "$log" 2>/dev/null | tail -1)
  grep -q '^VERDICT' "$log" 2>/dev/null && record lost_events any 0 "${lost:-0}"
}
cpu_ticks() { awk '{print $14+$15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }

# CPU of all the collector's threads in ns (clock ticks are too coarse for 5 s windows).
cpu_ns() { { cat /proc/"$1"/task/*/schedstat 2>/dev/null || true; } | awk '{s+=$1} END{print s+0}'; }

record() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"; }  # bench condition round value

# --- (a) wrk → nginx ----------------------------------------------------------------------
wrk_rps() { wrk -t1 -c32 -d"${SECS}s" http://127.0.0.1:25080/ 2>/dev/null | awk '/Requests\/sec/{print $2}'; }
# wrk_with BENCH COND ROUND QP PREFIX: the load's req/s recorded as BENCH; with a qscope (QP),
# its CPU and RSS meanwhile as PREFIX_cpu_pct and PREFIX_rss_kib.
wrk_with() {
  local c0 c1
  [[ -n $4 ]] && c0=$(cpu_ns "$4")
  record "$1" "$2" "$3" "$(wrk_rps)"
  [[ -n $4 ]] || return 0
  c1=$(cpu_ns "$4")
  record "$5_cpu_pct" "$2" "$3" "$(python3 -c "print(($c1-$c0)/1e9/$SECS*100)")"
  record "$5_rss_kib" "$2" "$3" "$(rss_kib "$4")"
}
if [[ $PARTS == *a* ]]; then
echo "bench: (a) wrk -> nginx static, $ROUNDS rounds x 5 conditions x ${SECS}s" >&2
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\nfloor\nother\ntarget\nthreads\n' | shuf); do
    qp="" fp=""
    case $cond in
      other) qp=$(attach "$idle_pid");; target) qp=$(attach "$nginx_worker");; floor) fp=$(attach_floor);;
      threads) qp=$(attach "$nginx_worker" --no-requests);;
    esac
    wrk_with nginx "$cond" "$r" "$qp" collector
    [[ -n $qp ]] && detach "$qp"
    [[ -n $fp ]] && stop_proc "$fp"
  done
done

# Per-program cost, in a window of its own with bpf_stats on: the floor, qscope filtered
# out (attached to an idle process: every nginx and wrk event is someone else's) and
# qscope on nginx. The stats cover only the programs the loader's own fds hold.
echo "bench: (a) per-program cost (bpf_stats on), 3 x ${SECS}s" >&2
sysctl -qw kernel.bpf_stats_enabled=1
for cond in floor other target; do
  case $cond in other) h=$(attach "$idle_pid");; target) h=$(attach "$nginx_worker");; floor) h=$(attach_floor);; esac
  prog_stats "$h" >"$work/ps0"
  wrk_rps >/dev/null
  prog_stats "$h" >"$work/ps1"
  python3 - "$work/ps0" "$work/ps1" "$SECS" "$cond" >>"$results" <<'PY'
import sys
def load(p):
    d={}
    for l in open(p):
        n,c,t=l.split(); d[n]=(int(c),int(t))
    return d
a,b=load(sys.argv[1]),load(sys.argv[2]); secs=float(sys.argv[3])
for n,(c,t) in b.items():
    c0,t0=a.get(n,(0,0))
    if c>c0: print(f"prog:{n.removeprefix('qs_').removeprefix('floor_')}\t{sys.argv[4]}\t1\t{(t-t0)/(c-c0):.1f}|{(c-c0)/secs:.0f}")
PY
  if [[ $cond == floor ]]; then stop_proc "$h"; else detach "$h"; fi
done
sysctl -qw kernel.bpf_stats_enabled=0
fi

# --- (d) the target in a cgroup of its own ----------------------------------------------------
if [[ $PARTS == *d* ]]; then
echo "bench: (d) target nginx in its own cgroup, $ROUNDS rounds x 6 conditions x ${SECS}s" >&2
bench_cgroup overhead
cg=$bench_cg
mkdir -p "$work/cg"
( echo $BASHPID >"$cg/cgroup.procs"; bench_nginx "$work/cg" 25081 )
sleep 0.5
cg_worker=$(pgrep -P "$(cat "$work/cg/nginx.pid")" | head -1)
# wrk_to other|target: the load on the unobserved nginx or on the target; its req/s.
wrk_to() {
  local port=25081; [[ $1 == other ]] && port=25080
  wrk -t1 -c32 -d"${SECS}s" "http://127.0.0.1:$port/" 2>/dev/null | awk '/Requests\/sec/{print $2}'
}
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\nglobal\ncgroup\n' | shuf); do
    for load in other target; do
      qp=""; [[ $cond != base ]] && qp=$(attach "$cg_worker" --scope "$cond")
      record "cg_$load" "$cond" "$r" "$(wrk_to $load)"
      [[ -n $qp ]] && detach "$qp"
    done
  done
done
# What each mode's programs cost per event and per second, from the kernel's own accounting
# (bpf_stats on only here): the arrivals' program on the other nginx's traffic is the point.
echo "bench: (d) per-program cost (bpf_stats on), 4 x ${SECS}s" >&2
sysctl -qw kernel.bpf_stats_enabled=1
for cond in global cgroup; do
  for load in other target; do
    h=$(attach "$cg_worker" --scope "$cond")
    s0=$(prog_stats "$h"); wrk_to "$load" >/dev/null; s1=$(prog_stats "$h")
    sock_prog_delta "$s0" "$s1" |
      while read -r n ns runs; do record "progd:${n#qs_}" "${cond}_$load" 1 "$ns|$(( runs / SECS ))"; done
    detach "$h"
  done
done
sysctl -qw kernel.bpf_stats_enabled=0
fi

# --- (e) several targets in one exporter ---------------------------------------------------
if [[ $PARTS == *e* ]]; then
echo "bench: (e) wrk -> nginx beside an exporter of 1 or 3 other targets, $ROUNDS rounds x 3 conditions x ${SECS}s" >&2
idle=()
for i in 1 2 3; do
  $T/qs_server --port 0 --workers 2 >"$work/idle$i.log" 2>&1 & pids+=($!); idle+=($!)
  ready_port "$work/idle$i.log" >/dev/null
done
# Starts `qscope export` of the first $1 idle servers; echoes its pid once every one is
# attached (the exporter says "serving" after its targets' first attach) and a tick is out.
export_of() {
  local log=$work/export-$RANDOM.log args=() i
  for ((i = 0; i < $1; i++)); do args+=(--target "idle$i=pid:${idle[$i]}"); done
  $Q export --listen 127.0.0.1:0 "${args[@]}" >"$log" 2>&1 &
  local qp=$!
  for _ in $(seq 400); do grep -q 'serving' "$log" 2>/dev/null && break; kill -0 $qp 2>/dev/null || { cat "$log" >&2; exit 1; }; sleep 0.05; done
  sleep 1
  echo $qp
}
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\none\nthree\n' | shuf); do
    qp=""
    case $cond in one) qp=$(export_of 1);; three) qp=$(export_of 3);; esac
    wrk_with exporter_nginx "$cond" "$r" "$qp" exporter
    [[ -n $qp ]] && stop_proc "$qp"
  done
done
# Every program of the exporter, from the kernel's own accounting (bpf_stats on only here):
# their CPU while wrk drives the unobserved nginx, all of it spent filtering that traffic out.
echo "bench: (e) the exporter's programs (bpf_stats on), 2 x ${SECS}s" >&2
sysctl -qw kernel.bpf_stats_enabled=1
for cond in one three; do
  n=1; [[ $cond == three ]] && n=3
  qp=$(export_of $n)
  p0=$(prog_stats "$qp")
  wrk_rps >/dev/null
  p1=$(prog_stats "$qp")
  s0=$(awk '{c+=$2; t+=$3} END{print c+0, t+0}' <<<"$p0")
  s1=$(awk '{c+=$2; t+=$3} END{print c+0, t+0}' <<<"$p1")
  record exporter_progs "$cond" 1 "$(python3 -c "a=list(map(int,'$s0'.split())); b=list(map(int,'$s1'.split())); print(f'{(b[1]-a[1])/1e9/$SECS*100:.2f}|{(b[0]-a[0])/$SECS:.0f}')")"
  # Which programs ran (a shared hook's runs count once, under its own name: the target's
  # program it jumps to is not counted again): NAME:runs/s, the busiest first.
  record exporter_prog_runs "$cond" 1 "$(prog_delta "$p0" "$p1" qs | sort -k3 -nr | head -8 |
    awk -v s="$SECS" '{printf "%s%s %.0f/s", (NR>1?", ":""), $1, $3/s}')"
  stop_proc "$qp"
done
sysctl -qw kernel.bpf_stats_enabled=0
fi

# --- (b) realistic service time --------------------------------------------------------------
if [[ $PARTS == *b* ]]; then
echo "bench: (b) qs_server 2 ms service time under qs_load" >&2
$T/qs_server --port 0 --workers 16 --service-ms 2 >"$work/real.log" 2>&1 & pids+=($!); real_pid=$!
real_port=$(ready_port "$work/real.log")
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\ntarget\n' | shuf); do
    qp=""; [[ $cond == target ]] && qp=$(attach "$real_pid")
    rps=$($T/qs_load --host 127.0.0.1 --port "$real_port" --connections 16 --duration "$SECS" 2>/dev/null |
          python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["rps"])')
    record realistic "$cond" "$r" "$rps"
    [[ -n $qp ]] && detach "$qp"
  done
done

fi

# --- (c) syscall micro-benchmarks ---------------------------------------------------------------
if [[ $PARTS == *c* ]]; then
echo "bench: (c) syscall micro-benchmarks (pinned to one CPU)" >&2
micro() {  # mode iterations condition round
  local f=$work/go-$RANDOM
  # Pinned: the ping-pong's two threads then hand the CPU to each other on every message
  # (two switches, two wake-ups, two sends, two receives, two data-ready per round trip)
  # instead of landing on one or two CPUs by chance, which swung it by microseconds.
  taskset -c 1 $B/bench/qs_syscall_bench "$1" "$2" --wait-file "$f" >"$work/micro.log" 2>&1 &
  local bp=$! qp=""
  for _ in $(seq 100); do grep -q READY "$work/micro.log" && break; sleep 0.02; done
  local fp=""
  case $3 in other) qp=$(attach "$idle_pid");; target) qp=$(attach "$bp");; floor) fp=$(attach_floor);; esac
  touch "$f"; wait "$bp" || true
  record "micro_$1" "$3" "$4" "$(sed -n 's/.*ns_per_op=\([0-9.]*\).*/\1/p' "$work/micro.log")"
  [[ -n $qp ]] && detach "$qp"
  [[ -n $fp ]] && stop_proc "$fp"
  rm -f "$f"
}
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\nfloor\nother\ntarget\n' | shuf); do
    micro getppid 3000000 "$cond" "$r"
    micro futex 3000000 "$cond" "$r"
    micro pingpong 100000 "$cond" "$r"
  done
done
fi

# --- report --------------------------------------------------------------------------------------
python3 - "$results" <<'PY' | tee "${OUT:-/dev/null}"
import sys, statistics as st, collections
rows=[l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by=collections.defaultdict(dict)
for bench,cond,rnd,val in rows:
    by[bench].setdefault(cond,{})[rnd]=val
def ratios(bench, cond, base="base"):
    d=by[bench]; out=[]
    for rnd,v in d.get(cond,{}).items():
        b=d.get(base,{}).get(rnd)
        if b and v and float(b)>0: out.append(float(v)/float(b))
    return out
def fmt(rs, invert=False):
    if not rs: return "n/a"
    med=st.median(rs); lo,hi=min(rs),max(rs)
    return f"{(med-1)*100:+.1f}% (range {(lo-1)*100:+.1f}%..{(hi-1)*100:+.1f}%, n={len(rs)})"
print("| benchmark | condition | change vs. baseline, median of paired rounds |")
print("|---|---|---|")
for cond,label,base in (("floor","empty programs on the same hooks (floor)","base"),
                        ("other","qscope attached to another process","base"),
                        ("target","qscope attached to nginx","base"),
                        ("threads","qscope --no-requests attached to nginx (scheduler probes only)","base"),
                        ("other","qscope attached to another process, vs. the floor","floor")):
    if by["nginx"]: print(f"| (a) wrk → nginx static, req/s | {label} | {fmt(ratios('nginx',cond,base))} |")
for load,label in (("other","(d) wrk → an unobserved nginx beside a target in its own cgroup, req/s"),
                   ("target","(d) wrk → the target nginx in its own cgroup, req/s")):
    if by[f"cg_{load}"]:
        for cond,what in (("global","qscope --scope global on the target"),("cgroup","qscope --scope cgroup on the target")):
            print(f"| {label} | {what} | {fmt(ratios('cg_'+load,cond))} |")
        print(f"| {label} | --scope cgroup vs. --scope global | {fmt(ratios('cg_'+load,'cgroup','global'))} |")
if by["exporter_nginx"]:
    for cond,label,base in (("one","an exporter of 1 other target","base"),("three","an exporter of 3 other targets","base"),
                            ("three","3 targets vs. 1 (one exporter each time)","one")):
        print(f"| (e) wrk → nginx, req/s | {label} | {fmt(ratios('exporter_nginx',cond,base))} |")
if by["realistic"]: print(f"| (b) qs_server 2 ms service, req/s | qscope attached | {fmt(ratios('realistic','target'))} |")
for m in ("getppid","futex","pingpong"):
    b=f"micro_{m}"
    for cond,label,bc in (("floor","empty programs on the same hooks (floor)","base"),
                          ("other","filtered out (attached elsewhere)","base"),
                          ("target","targeted","base"),
                          ("other","filtered out, vs. the floor","floor")):
        d=by[b]; diffs=[]
        for rnd,v in d.get(cond,{}).items():
            base=d.get(bc,{}).get(rnd)
            if base: diffs.append(float(v)-float(base))
        if diffs: print(f"| (c) {m}, ns/op | {label} | {st.median(diffs):+.1f} ns (range {min(diffs):+.1f}..{max(diffs):+.1f}) |")
for cond in ("one","three"):
    v=by["exporter_progs"].get(cond,{}).get("1")
    if v:
        pct,runs=v.split("|")
        print(f"| exporter's BPF programs during (e), bpf_stats on | {cond} target(s) | {pct}% of a CPU, {int(runs):,} runs/s |")
for cond in ("one","three"):
    v=by["exporter_prog_runs"].get(cond,{}).get("1")
    if v: print(f"| exporter's busiest programs during (e) | {cond} target(s) | {v} |")
for cond in ("one","three"):
    cpu=[float(v) for v in by["exporter_cpu_pct"].get(cond,{}).values()]
    rss=[float(v) for v in by["exporter_rss_kib"].get(cond,{}).values()]
    if cpu: print(f"| exporter during (e) | {cond} target(s) | CPU {st.median(cpu):.2f}% of a core, RSS {st.median(rss)/1024:.1f} MiB |")
for cond in ("other","target","threads"):
    cpu=[float(v) for v in by["collector_cpu_pct"].get(cond,{}).values()]
    rss=[float(v) for v in by["collector_rss_kib"].get(cond,{}).values()]
    if cpu: print(f"| collector during (a) | {cond} | CPU {st.median(cpu):.2f}% of a core, RSS {st.median(rss)/1024:.1f} MiB |")
stops=[float(r[3]) for r in rows if r[0]=="stop_ms"]
if stops: print(f"| qscope snapshot exit after SIGINT | all attaches | median {st.median(stops):.0f} ms, max {max(stops):.0f} ms (n={len(stops)}) |")
lost=[int(r[3]) for r in rows if r[0]=="lost_events"]
if lost: print(f"| lost events (from each snapshot's report) | all attaches | {sum(lost)} in total, {sum(1 for v in lost if v)} of {len(lost)} attaches lost any |")
print()
progs=collections.defaultdict(dict)
for bench,cond,rnd,val in rows:
    if bench.startswith("prog:"): progs[bench[5:]][cond]=tuple(float(x) for x in val.split("|"))
progd=collections.defaultdict(dict)
for bench,cond,rnd,val in rows:
    if bench.startswith("progd:"): progd[bench[6:]][cond]=tuple(float(x) for x in val.split("|"))
if progd:
    conds=("global_other","cgroup_other","global_target","cgroup_target")
    print("| BPF program, during (d) with bpf_stats on, ns/run (runs/s) | --scope global, wrk → the other nginx | --scope cgroup, wrk → the other nginx | --scope global, wrk → the target | --scope cgroup, wrk → the target |")
    print("|---|---|---|---|---|")
    for n,d in sorted(progd.items()):
        print(f"| {n} | " + " | ".join("–" if c not in d else f"{d[c][0]:.0f} ({d[c][1]:.0f}/s)" for c in conds) + " |")
    tot=lambda c: sum(v[c][0]*v[c][1] for v in progd.values() if c in v)/1e7
    print("| all of qscope's socket programs, % of a CPU | " + " | ".join(f"{tot(c):.2f}%" for c in conds) + " |")
    print()
if progs:
    print("| BPF program, during (a) with bpf_stats on | floor: empty program, ns/run | qscope filtered out, ns/run (runs/s) | qscope on nginx, ns/run (runs/s) |")
    print("|---|---|---|---|")
    def cell(v, rate=True): return "–" if v is None else (f"{v[0]:.0f} ({v[1]:.0f}/s)" if rate else f"{v[0]:.0f}")
    for n,d in sorted(progs.items()):
        print(f"| {n} | {cell(d.get('floor'), False)} | {cell(d.get('other'))} | {cell(d.get('target'))} |")
PY
