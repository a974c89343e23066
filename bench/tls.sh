#!/usr/bin/env bash
# The cost of --tls, side by side in one run: over HTTPS (TLS 1.3) to nginx serving a 2-byte
# response (the worst case: every request is one SSL_write), HTTP/1.1 from wrk (keep-alive)
# and HTTP/2 from h2load (2 connections, 10 streams each), in interleaved rounds of three
# conditions: no qscope | qscope attached to nginx | qscope --tls attached to nginx. Under
# --tls, HTTP/1.1 is measured first (one uprobe per response), then one HTTP/2 warm-up makes
# qscope add the plaintext walk's probes (SSL_read, the returns) and HTTP/2 is measured with
# them. Reported as ratios of req/s against the baseline of the same round, median and range
# over the rounds; then, in a separate window with kernel.bpf_stats_enabled, ns per run of
# the uprobe programs (the trap into the kernel itself is not in bpf_stats: the ratio has it).
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
h2_rps() { h2load -D "$SECS" -c 2 -m 10 "https://127.0.0.1:$port/" 2>/dev/null | awk '/^finished in/{print $4}'; }
h2_warm() { h2load -n 100 -c 1 "https://127.0.0.1:$port/" >/dev/null 2>&1; sleep 1.5; }  # a tick: walk attached
attach() {  # flags...: starts qscope on the worker, sets qp once its probes are loaded
  $Q snapshot --pid "$worker" --duration 3600 --no-threads "$@" >"$work/q.log" 2>&1 &
  qp=$!
  int_pids=("$qp")
  for _ in $(seq 200); do grep -q 'observing PID' "$work/q.log" && break; sleep 0.05; done
  sleep 0.5
}
detach() { kill -INT "$qp"; wait "$qp" 2>/dev/null || true; qp=""; int_pids=(); }

echo "tls: wrk (HTTP/1.1) and h2load (HTTP/2) over https -> nginx static, $ROUNDS rounds x 3 conditions x 2 x ${SECS}s" >&2
: >"$work/r.tsv"
wrk_rps >/dev/null; h2load -n 1000 -c 2 "https://127.0.0.1:$port/" >/dev/null 2>&1  # warm-up
measure() {  # round condition: one HTTP/1.1 and one HTTP/2 measurement (under --tls, h2_warm between)
  echo -e "$1\t$2\th1\t$(wrk_rps)" >>"$work/r.tsv"
  [[ $2 == tls ]] && h2_warm
  echo -e "$1\t$2\th2\t$(h2_rps)" >>"$work/r.tsv"
}
for r in $(seq "$ROUNDS"); do
  for cond in base plain tls; do
    case $cond in
      base) measure "$r" base;;
      plain) attach; measure "$r" plain; detach;;
      tls) attach --tls; measure "$r" tls; detach;;
    esac
  done
done

# ns per run of each program, --tls attached and the walk's probes added, bpf_stats on only here.
attach --tls
h2_warm
sysctl -qw kernel.bpf_stats_enabled=1
s0=$(prog_stats "$qp"); wrk_rps >/dev/null; h2_rps >/dev/null; s1=$(prog_stats "$qp")
sysctl -qw kernel.bpf_stats_enabled=0
detach

report=$(python3 - "$work/r.tsv" <<PY "$s0" "$s1"
import sys, statistics as st
rows=[l.split("\t") for l in open(sys.argv[1]).read().split("\n") if l]
by={}
for r,c,p,v in rows: by.setdefault(r,{})[(c,p)]=float(v or 0)
print("| condition | HTTP/1.1 (wrk) req/s vs. no qscope | HTTP/2 (h2load) req/s vs. no qscope |")
print("|---|---|---|")
print("| no qscope | " + " | ".join(f"{st.median(v[('base',p)] for v in by.values()):.0f} req/s" for p in ("h1","h2")) + " |")
def ratio(c,p):
    rs=[v[(c,p)]/v[("base",p)] for v in by.values() if v[("base",p)]]
    return f"{st.median(rs):.3f} ({min(rs):.3f}..{max(rs):.3f})"
for c,label in (("plain","qscope attached"),("tls","qscope --tls attached")):
    print(f"| {label} | {ratio(c,'h1')} | {ratio(c,'h2')} |")
print()
print("Median (range) of $ROUNDS paired rounds. Under --tls, HTTP/1.1 is measured before any HTTP/2")
print("answer (one uprobe per response), HTTP/2 after (the walk's probes added: four per request).")
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
