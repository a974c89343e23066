#!/usr/bin/env bash
# Two qscope builds side by side on a gRPC server: what reading gRPC's status costs. The
# target is tests/integration/grpc_slow.py's server (Debian's python3-grpcio, C-core, h2c);
# its client keeps 40 calls in flight on one channel, 1 in 4 of them a Fail (UNAVAILABLE), for
# S seconds. Each build is attached in turn (alternating rounds) to the server from before the
# client connects, so a build that reads grpc-status walks every response header block of the
# connection field by field (bpf/hpack.h) on top of the frame walk both builds run.
# Reports each sock program's ns per run (kernel.bpf_stats_enabled) per build with the spread
# over rounds, and from the server's own count of answers, the programs' ns per answer
# (ns/run x runs / answers: all their time over the load, whatever the batching) and the
# difference new - old per answer, paired within each round. Needs root; loopback only;
# bounded (~rounds x 2 x (S + 6) s).
#
#   sudo bench/grpc_cost.sh OLD/qscope NEW/qscope [--rounds N=5] [--seconds S=5] [--out FILE]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_QSCOPE NEW_QSCOPE [--rounds N] [--seconds S] [--out FILE]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2"); shift 2
. bench/lib.sh
bench_args grpc_cost "$@"
py=/usr/bin/python3
"$py" -c 'import grpc' 2>/dev/null || { echo "grpc_cost: $py does not import grpc (Debian: python3-grpcio)" >&2; exit 1; }
script=$root/tests/integration/grpc_slow.py
bench_begin grpc
sysctl -qw kernel.bpf_stats_enabled=1

port=28491
"$py" "$script" server --port "$port" --counters-file "$work/counters.json" >"$work/server.out" 2>&1 &
server=$!; pids+=("$server")
for _ in $(seq 100); do grep -q READY "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q READY "$work/server.out" || { echo "grpc_cost: the gRPC server did not start" >&2; exit 1; }
touch "$work/fail"   # the client's --fail-file: every 4th call a Fail from the start

answers() { "$py" -c 'import json,sys; c=json.load(open(sys.argv[1])); print(c["completed"] + c["failed"])' \
  "$work/counters.json"; }

# one round of build BIN: attached to the server, then the client's load for SECS; prints
# "prog NAME NS_PER_RUN RUNS" lines, "answers N" and the build's "grpc ..." count
round() {
  local bin=$1 qs s0 s1 a0 a1
  "$bin" snapshot --pid "$server" --duration 3600 --json --no-threads >"$work/qs.json" 2>"$work/qs.err" &
  qs=$!; int_pids+=("$qs")
  sleep 4   # attached and seeded
  s0=$(prog_stats "$qs"); a0=$(answers)
  timeout $((SECS + 30)) "$py" "$script" client --port "$port" --concurrency 40 --seconds "$SECS" \
    --fail-file "$work/fail" >"$work/client.out" 2>&1 || true
  s1=$(prog_stats "$qs"); a1=$(answers)
  kill -INT "$qs"; wait "$qs" 2>/dev/null || true
  sock_prog_delta "$s0" "$s1" | sed 's/^/prog /'
  echo "answers $((a1 - a0))"
  "$py" - "$work/qs.json" <<'PY'
import json, sys
try:
    h = json.load(open(sys.argv[1]))["requests"]["h2"]
    print("grpc", json.dumps(h.get("grpc_status", {}), separators=(",", ":")), h.get("grpc_status_unread", "-"))
except Exception:
    pass
PY
}

declare -A ns runs per
rep=()
for ((r = 1; r <= ROUNDS; r++)); do
  order=(old new); (( r % 2 == 0 )) && order=(new old)
  declare -A nr=() rr=() ans=()
  for which in "${order[@]}"; do
    bin=$OLD; [[ $which == new ]] && bin=$NEW
    while read -r kind a b c _; do
      case $kind in
        prog) ns[$which.$a]+="$b " runs[$which.$a]+="$c "; nr[$which.$a]=$b rr[$which.$a]=$c;;
        answers) ans[$which]=$a;;
        grpc) rep+=("round $r, $which build: grpc_status $a, unread $b, of ${ans[$which]:-?} answers");;
      esac
    done < <(round "$bin")
  done
  for p in qs_recv qs_send; do
    for which in old new; do
      [[ -n ${nr[$which.$p]:-} && ${ans[$which]:-0} -gt 0 ]] &&
        per[$which.$p]+="$(python3 -c "print('%.0f' % (${nr[$which.$p]} * ${rr[$which.$p]} / ${ans[$which]}))") "
    done
    [[ -n ${nr[old.$p]:-} && -n ${nr[new.$p]:-} && ${ans[old]:-0} -gt 0 && ${ans[new]:-0} -gt 0 ]] &&
      per[delta.$p]+="$(python3 -c "print('%.0f' % (${nr[new.$p]} * ${rr[new.$p]} / ${ans[new]} - ${nr[old.$p]} * ${rr[old.$p]} / ${ans[old]}))") "
  done
  rep+=("round $r (${order[*]}): answers old ${ans[old]:-?} new ${ans[new]:-?}; qs_send ns/run ${nr[old.qs_send]:-?} -> ${nr[new.qs_send]:-?}, qs_recv ${nr[old.qs_recv]:-?} -> ${nr[new.qs_recv]:-?}")
  unset nr rr ans
done

med() { tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{a[NR]=$1} END{if (NR) printf "%s (%s..%s)", a[int((NR+1)/2)], a[1], a[NR]; else printf "-"}'; }
{
  echo "grpc_cost: python3-grpcio server (C-core, h2c), 40 calls in flight on one channel, 1 in 4 a Fail; $ROUNDS rounds of ${SECS}s per build, alternating; bpf_stats on"
  printf '%-34s %-26s %-26s\n' "" old new
  for p in qs_recv qs_send; do
    printf '%-34s %-26s %-26s\n' "$p ns/run" "$(echo "${ns[old.$p]:-}" | med)" "$(echo "${ns[new.$p]:-}" | med)"
    printf '%-34s %-26s %-26s\n' "$p runs" "$(echo "${runs[old.$p]:-}" | med)" "$(echo "${runs[new.$p]:-}" | med)"
    printf '%-34s %-26s %-26s\n' "$p ns per answer" "$(echo "${per[old.$p]:-}" | med)" "$(echo "${per[new.$p]:-}" | med)"
    printf '%-34s %s\n' "$p new - old ns per answer (paired)" "$(echo "${per[delta.$p]:-}" | med)"
  done
  for l in "${rep[@]}"; do echo "$l"; done
} | tee ${OUT:+"$OUT"}
