#!/usr/bin/env bash
# The cost of --tls, side by side in one run: wrk over HTTPS (keep-alive, TLS 1.3) to nginx
# serving a 2-byte response (the worst case: every request is one SSL_write), in interleaved
# rounds of three conditions: no qscope | qscope attached to nginx | qscope --tls attached to
# nginx. Reported as ratios of req/s against the baseline of the same round, median and range
# over the rounds; then, in a separate window with kernel.bpf_stats_enabled, ns per run of
# the uprobe program (the trap into the kernel itself is not in bpf_stats: the ratio has it).
# Needs root. Loopback only; bounded.
#
#   sudo bench/tls.sh [--rounds N=5] [--seconds S=5] [--out FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
bench_args tls "$@"
bench_build qscope
Q=$B/qscope
port=25443
work=$(mktemp -d /tmp/qscope-bench-tls-XXXXXX)
trap bench_cleanup EXIT
old_stats=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -qw kernel.bpf_stats_enabled=0

bench_nginx "$work" "$port" ssl
sleep 0.5
worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)

wrk_rps() { wrk -t1 -c32 -d"${SECS}s" "https://127.0.0.1:$port/" 2>/dev/null | awk '/Requests\/sec/{print $2}'; }
attach() {  # flags...: starts qscope on the worker, sets qp once its probes are loaded
  $Q snapshot --pid "$worker" --duration 3600 --no-threads "$@" >"$work/q.log" 2>&1 &
  qp=$!
  int_pids=("$qp")
  for _ in $(seq 200); do grep -q 'observing PID' "$work/q.log" && break; sleep 0.05; done
  sleep 0.5
}
detach() { kill -INT "$qp"; wait "$qp" 2>/dev/null || true; qp=""; int_pids=(); }

echo "tls: wrk https -> nginx static, $ROUNDS rounds x 3 conditions x ${SECS}s" >&2
: >"$work/r.tsv"
wrk_rps >/dev/null  # warm-up
for r in $(seq "$ROUNDS"); do
  for cond in base plain tls; do
    case $cond in
      base) echo -e "$r\t$cond\t$(wrk_rps)" >>"$work/r.tsv";;
      plain) attach; echo -e "$r\t$cond\t$(wrk_rps)" >>"$work/r.tsv"; detach;;
      tls) attach --tls; echo -e "$r\t$cond\t$(wrk_rps)" >>"$work/r.tsv"; detach;;
    esac
  done
done

# ns per run of each program, --tls attached, bpf_stats on only here.
attach --tls
sysctl -qw kernel.bpf_stats_enabled=1
s0=$(prog_stats "$qp"); wrk_rps >/dev/null; s1=$(prog_stats "$qp")
sysctl -qw kernel.bpf_stats_enabled=0
detach

report=$(python3 - "$work/r.tsv" <<PY "$s0" "$s1"
import sys, statistics as st
rows=[l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by={}
for r,c,v in rows: by.setdefault(r,{})[c]=float(v)
print("| condition | req/s vs. no qscope, median (range) of $ROUNDS paired rounds |")
print("|---|---|")
print(f"| no qscope | {st.median(v['base'] for v in by.values()):.0f} req/s |")
for c,label in (("plain","qscope attached"),("tls","qscope --tls attached")):
    rs=[v[c]/v["base"] for v in by.values()]
    print(f"| {label} | {st.median(rs):.3f} ({min(rs):.3f}..{max(rs):.3f}) |")
def parse(t):
    d={}
    for l in t.split("\n"):
        if l: n,c,ns=l.split(); d[n]=(int(c),int(ns))
    return d
a,b=parse(sys.argv[2]),parse(sys.argv[3])
print()
print("| program (--tls, bpf_stats) | runs | ns per run |")
print("|---|---|---|")
for n in sorted(b):
    c=b[n][0]-a.get(n,(0,0))[0]; ns=b[n][1]-a.get(n,(0,0))[1]
    if c>0: print(f"| {n} | {c} | {ns/c:.0f} |")
PY
)
echo "$report"
[[ -n $OUT ]] && echo "$report" >"$OUT"
exit 0
