#!/usr/bin/env bash
# qscope next to Debian's libbpf-tools (runqlat, offcputime) on the same target, nginx's worker
# under wrk: (1) throughput cost of each tool in interleaved paired rounds, (2) whether their
# numbers agree with qscope's when all three watch the same window. Needs root; loopback only.
#
#   sudo bench/compare_libbpf_tools.sh [--rounds N=5] [--seconds S=5] [--out FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. bench/lib.sh
bench_args compare "$@"
for t in runqlat offcputime wrk nginx; do command -v $t >/dev/null || { echo "compare: $t missing (apt-get install libbpf-tools wrk nginx)" >&2; exit 1; }; done
bench_build qscope
Q=$B/qscope
bench_begin cmp
PORT=${COMPARE_PORT:-25180}
bench_nginx "$work" "$PORT"
sleep 0.5
W=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
results=$work/results.tsv; : >"$results"
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$results"; }

# Starts tool $1 on the worker and waits until it is attached; echoes its pid.
start_tool() {
  local log=$work/$1.log p
  case $1 in
    runqlat) runqlat -p "$W" >"$log" 2>&1 & p=$!;;
    offcputime) offcputime -p "$W" >"$log" 2>&1 & p=$!;;
    qscope) $Q snapshot --pid "$W" --duration 3600 >"$log" 2>&1 & p=$!
            for _ in $(seq 200); do grep -q 'observing PID' "$log" 2>/dev/null && break; sleep 0.05; done;;
  esac
  sleep 1.5   # libbpf-tools print nothing when attached: give them the time qscope needs
  kill -0 "$p" 2>/dev/null || { echo "compare: $1 exited at start:" >&2; cat "$log" >&2; exit 1; }
  echo "$p"
}
stop_tool() { kill -INT "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

echo "compare: overhead, $ROUNDS rounds x 4 conditions x ${SECS}s" >&2
for r in $(seq "$ROUNDS"); do
  for cond in $(printf 'base\nrunqlat\noffcputime\nqscope\n' | shuf); do
    p=""; [[ $cond != base ]] && p=$(start_tool "$cond") && int_pids=("$p")
    rps=$(wrk -t1 -c32 -d"${SECS}s" "http://127.0.0.1:$PORT/" 2>/dev/null | awk '/Requests\/sec/{print $2}')
    record "$cond" "$r" "$rps"
    [[ -n $p ]] && stop_tool "$p" && int_pids=()
  done
done

echo "compare: agreement, all three on the worker during one ${SECS}s wrk window" >&2
# The load runs before any tool attaches and outlasts them all: each tool's window (from its
# own attach) then sees the same steady state. Started the other way round, qscope (which
# counts a wait in progress at attach from the attach) counted the worker's idle epoll_wait
# before wrk began, and offcputime (which counts a wait only when it ends) did not.
wrk -t1 -c32 -d"$((SECS + 6))s" "http://127.0.0.1:$PORT/" >/dev/null 2>&1 & w=$!
sleep 1
runqlat -p "$W" "$SECS" 1 >"$work/rq.txt" 2>&1 & a=$!
offcputime -p "$W" "$SECS" >"$work/off.txt" 2>&1 & b=$!
$Q snapshot --pid "$W" --duration "$SECS" --json >"$work/q.json" 2>"$work/q.err" & c=$!
int_pids=("$a" "$b" "$c") pids=("$w")
wait $a $b $c || true
wait $w || true

python3 - "$results" "$work/rq.txt" "$work/off.txt" "$work/q.json" <<'PY' | tee "${OUT:-/dev/null}"
import sys, json, re, statistics as st, collections
rows=[l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by=collections.defaultdict(dict)
for cond,rnd,v in rows:
    if v: by[cond][rnd]=float(v)
print("| tool attached to nginx's worker | req/s change vs. baseline, median of paired rounds |")
print("|---|---|")
for cond in ("runqlat","offcputime","qscope"):
    rs=[by[cond][r]/by["base"][r] for r in by[cond] if by["base"].get(r)]
    if rs: print(f"| {cond} | {(st.median(rs)-1)*100:+.1f}% (range {(min(rs)-1)*100:+.1f}%..{(max(rs)-1)*100:+.1f}%, n={len(rs)}) |")
print()
# runqlat: log2 histogram in usecs -> count and bucket of p50 / p99
hist=[]
for l in open(sys.argv[2]):
    m=re.match(r"\s*(\d+)\s*->\s*(\d+)\s*:\s*(\d+)",l)
    if m: hist.append((int(m[1]),int(m[2]),int(m[3])))
def bucket(q):
    tot=sum(c for *_,c in hist); acc=0
    for lo,hi,c in hist:
        acc+=c
        if tot and acc>=q*tot: return f"{lo}..{hi} us"
    return "n/a"
try: q=json.load(open(sys.argv[4]))
except Exception as e: q={}; print(f"qscope JSON unreadable: {e}")
groups=q.get("thread_groups",[])
print("| run-queue wait of nginx's worker | runqlat -p | qscope (thread_groups) |")
print("|---|---|---|")
print(f"| wake-ups counted | {sum(c for *_,c in hist)} | n/a (qscope keeps total seconds) |")
for name,key,qq in (("p50","p50",0.5),("p99","p99",0.99)):
    qs=", ".join(f"{g['name']}: {g['runqueue_wait'][key]*1e6:.0f} us" for g in groups if g.get("runqueue_wait"))
    print(f"| {name} | {bucket(qq)} | {qs or 'n/a'} |")
tw=", ".join("%s: %.1f ms" % (g["name"], g["runqueue_wait_seconds"]*1e3) for g in groups)
print(f"| total wait | n/a | {tw} |")
print()
# offcputime: folded-ish output, stacks separated by blank lines, last line of each block = usecs
text=open(sys.argv[3]).read()
blocks=[b for b in text.split("\n\n") if b.strip()]
stacks=[]
for b in blocks:
    ls=[l.strip() for l in b.splitlines() if l.strip()]
    if ls and ls[-1].isdigit(): stacks.append((int(ls[-1]), ls[:-1]))
stacks.sort(reverse=True)
tot=sum(u for u,_ in stacks)
print("| off-CPU of nginx's worker | offcputime -p | qscope (waits) |")
print("|---|---|---|")
ws=sorted(q.get("waits",[]), key=lambda w:-w.get("blocked_seconds",0))
print(f"| total blocked | {tot/1e3:.1f} ms over {len(stacks)} stacks | {sum(w.get('blocked_seconds',0) for w in ws)*1e3:.1f} ms over {len(ws)} waits |")
for i in range(3):
    # the innermost frames are the tracer itself and schedule(): show the first three beyond them
    fr=[s.split()[-1] for s in stacks[i][1]] if i<len(stacks) else []
    fr=[f for f in fr if not re.match(r"(bpf_|__traceiter|__bpf_trace|__schedule|schedule|__traceiter|finish_task|trace_)", f)]
    a=f"{stacks[i][0]/1e3:.1f} ms: {' <- '.join(fr[:3])}" if i<len(stacks) else ""
    b=f"{ws[i].get('blocked_seconds',0)*1e3:.1f} ms: {ws[i].get('syscall','')} {ws[i].get('resource','')}" if i<len(ws) else ""
    print(f"| #{i+1} | {a} | {b} |")
# offcputime times a sleep from switch-out to switch-in, so it includes the wait for a CPU
# after the wake-up (and preemptions); qscope splits that off into run-queue wait.
rq=sum(g.get("runqueue_wait_seconds",0) for g in groups)
bl=sum(w.get('blocked_seconds',0) for w in ws)
if tot: print(f"| off-CPU = blocked + run-queue wait | {tot/1e3:.1f} ms | {(bl+rq)*1e3:.1f} ms ({((bl+rq)*1e6/tot-1)*100:+.1f}%) |")
err=[l for l in open(sys.argv[3]) if "fail" in l.lower() or "error" in l.lower()][:3]
if err: print("\noffcputime said:", *err)
PY
