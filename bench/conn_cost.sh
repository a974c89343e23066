#!/usr/bin/env bash
# The sock family's cost per connection: a server that closes after each response, clients
# opening a new connection per request at a fixed rate (connection churn: every program that
# runs once or a few times per connection, accept, close and the state changes, shows), and
# the kernel's own accounting of qscope's programs (bpf_stats: ns per run, runs).
# Needs root. Loopback only; bounded (rounds x ~15 s).
#
#   sudo bench/conn_cost.sh [--rounds N=3] [--rate R=3000] [--base DIR] [--syscall]
#     --base DIR: a second build (DIR/qscope) measured in alternating rounds against this one
#       (QSCOPE_BUILD_DIR, default build): A/B side by side in one run.
#     --syscall: keep-alive clients and QSCOPE_SOCK_ATTACH=syscall, the fallback where every
#       read and write resolves its fd to a socket.
# Prints per program: median ns/run (range over the rounds) and runs per request (with churn,
# one request per connection), and their sum per request.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ROUNDS=3 RATE=3000 BASE="" SYSCALL=""
while [[ $# -gt 0 ]]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2;;
    --rate) RATE=$2; shift 2;;
    --base) BASE=$2; shift 2;;
    --syscall) SYSCALL=1; shift;;
    *) echo "usage: $0 [--rounds N] [--rate R] [--base DIR] [--syscall]" >&2; exit 2;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "conn_cost: needs root (BPF)" >&2; exit 1; }
[[ -z $BASE || -x $BASE/qscope ]] || { echo "conn_cost: no qscope in $BASE" >&2; exit 2; }
. bench/lib.sh
bench_begin conn-cost
bench_build qscope qs_server qs_load
sysctl -qw kernel.bpf_stats_enabled=1
PORT=25310 SECS=6

# one_round QSCOPE: prints "NAME NS RUNS" per program and "requests N" (the server's count).
one_round() {
  local q=$1 srv snap a b env=() srv_args=(--keepalive=0) load_args=(--new-conn-per-request)
  if [[ -n $SYSCALL ]]; then env=(QSCOPE_SOCK_ATTACH=syscall); srv_args=(); load_args=(); fi
  "$B/targets/qs_server" --port "$PORT" --workers 8 --backlog 4096 "${srv_args[@]}" \
    --counters-file "$work/counters.json" >"$work/srv.log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do grep -q READY "$work/srv.log" && break; sleep 0.05; done
  env "${env[@]}" "$q" snapshot --pid "$srv" --duration 3600 --json --no-threads >/dev/null 2>"$work/q.err" &
  snap=$!
  for _ in $(seq 400); do grep -qs '^prog_id:' /proc/"$snap"/fdinfo/* && break; sleep 0.05; done
  sleep 1
  kill -0 "$snap" 2>/dev/null || { echo "conn_cost: qscope exited:" >&2; cat "$work/q.err" >&2; exit 1; }
  a=$(prog_stats "$snap")
  "$B/targets/qs_load" --host 127.0.0.1 --port "$PORT" --connections 16 --rate "$RATE" --duration "$SECS" \
    "${load_args[@]}" >/dev/null 2>&1
  b=$(prog_stats "$snap")
  prog_delta "$a" "$b" qs_
  sleep 0.1   # the server rewrites its counters every 10 ms
  echo "requests $(jq -r .completed "$work/counters.json")"
  kill -INT "$snap"
  wait "$snap" || true
  kill "$srv"
  wait "$srv" || true
}

builds=("$B")
[[ -n $BASE ]] && builds=("$BASE" "$B")
for r in $(seq "$ROUNDS"); do
  for b in "${builds[@]}"; do
    echo "conn_cost: round $r, $b" >&2
    one_round "$b/qscope" | sed "s|^|$b |" >>"$work/all"
  done
done

python3 - "$work/all" "${builds[@]}" <<'PY'
import sys, statistics
rows = [l.split() for l in open(sys.argv[1])]
builds = sys.argv[2:]
data, reqs = {}, {}
for r in rows:
    if r[1] == "requests":
        reqs.setdefault(r[0], []).append(int(r[2]))
    else:
        data.setdefault((r[0], r[1]), []).append((float(r[2]), int(r[3])))
names = sorted({n for _, n in data})
def cell(b, n):
    v = data.get((b, n))
    if not v: return "-"
    ns = [x for x, _ in v]
    per = statistics.median(runs for _, runs in v) / statistics.median(reqs[b])
    return f"{statistics.median(ns):.0f} ({min(ns):.0f}–{max(ns):.0f}), {per:.2f}/request"
print("| program | " + " | ".join(f"{b}: ns/run median (range), runs per request" for b in builds) + " |")
print("|---|" + "---|" * len(builds))
for n in names:
    print(f"| {n} | " + " | ".join(cell(b, n) for b in builds) + " |")
def total(b):
    t = 0.0
    for n in names:
        v = data.get((b, n))
        if v:
            t += statistics.median(x for x, _ in v) * statistics.median(runs for _, runs in v) / statistics.median(reqs[b])
    return f"{t:.0f} ns"
print("| all, per request (sum of ns/run x runs per request) | " + " | ".join(total(b) for b in builds) + " |")
for b in builds:
    print(f"{b}: {statistics.median(reqs[b])} requests per round (median)", file=sys.stderr)
PY
