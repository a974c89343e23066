#!/usr/bin/env bash
# Two qscope builds side by side in one run, for a change's before/after: each attached in
# turn (shuffled rounds) to an idle process while wrk drives a static nginx, so every socket
# and scheduler event they see is someone else's. Reports, from the kernel's own accounting
# (kernel.bpf_stats_enabled), each program's ns per run for the two builds with the spread
# over rounds, and wrk's throughput under each. Needs root; loopback only; bounded.
#
#   sudo bench/compare_builds.sh OLD/qscope NEW/qscope [--rounds N=5] [--seconds S=4]
#
# qs_server comes from the new build's tree (NEW/../targets).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_QSCOPE NEW_QSCOPE [--rounds N] [--seconds S]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2"); shift 2
. bench/lib.sh
bench_args compare_builds "$@"
[[ " $* " == *" --seconds "* ]] || SECS=4
T=$(dirname "$NEW")/targets
work=$(mktemp -d /tmp/qscope-cmp-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f $work/nginx.pid ]] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  sysctl -qw kernel.bpf_stats_enabled="${old_stats:-0}" || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
old_stats=$(sysctl -n kernel.bpf_stats_enabled)

bench_nginx "$work" 25180
$T/qs_server --port 0 --workers 2 >"$work/idle.log" 2>&1 & pids+=($!); idle_pid=$!
for _ in $(seq 200); do grep -q 'READY' "$work/idle.log" && break; sleep 0.05; done

: >"$work/runs.tsv"
sysctl -qw kernel.bpf_stats_enabled=1
for r in $(seq "$ROUNDS"); do
  for which in $(printf 'old\nnew\n' | shuf); do
    bin=$OLD; [[ $which == new ]] && bin=$NEW
    log=$work/q.log
    $bin snapshot --pid "$idle_pid" --duration 3600 >"$log" 2>&1 & qp=$!
    for _ in $(seq 200); do grep -q 'observing PID' "$log" && break; sleep 0.05; done
    sleep 0.5
    prog_stats $qp >"$work/before"
    rps=$(wrk -t1 -c32 -d"${SECS}s" http://127.0.0.1:25180/ 2>/dev/null | awk '/Requests\/sec/{print $2}')
    prog_stats $qp >"$work/after"
    kill -INT $qp; wait $qp 2>/dev/null || true
    printf '%s\t%s\twrk_rps\t%s\n' "$which" "$r" "$rps" >>"$work/runs.tsv"
    join <(sort "$work/before") <(sort "$work/after") | awk -v w="$which" -v r="$r" '
      { n=$4-$2; t=$5-$3; if (n > 1000) printf "%s\t%s\t%s\t%.1f\n", w, r, $1, t/n }' >>"$work/runs.tsv"
  done
done
sysctl -qw kernel.bpf_stats_enabled="$old_stats"

python3 - "$work/runs.tsv" <<'PY'
import sys, statistics as st
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
data = {}
for which, r, name, v in rows:
    data.setdefault(name, {}).setdefault(which, []).append(float(v))
def cell(vs):
    return "%.1f (%.1f..%.1f)" % (st.median(vs), min(vs), max(vs)) if vs else "-"
print("| program (filtered out: attached to an idle process) | old: median (range) | new: median (range) | new/old |")
print("|---|---|---|---|")
for name in sorted(data, key=lambda n: (n == "wrk_rps", n)):
    o, n = data[name].get("old", []), data[name].get("new", [])
    ratio = "%.2f" % (st.median(n) / st.median(o)) if o and n and st.median(o) else "-"
    label = "wrk → nginx, requests/s" if name == "wrk_rps" else name + ", ns/run"
    print("| %s | %s | %s | %s |" % (label, cell(o), cell(n), ratio))
PY
