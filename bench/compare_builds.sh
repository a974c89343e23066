#!/usr/bin/env bash
# Two qscope builds side by side in one run, for a change's before/after: each attached in
# turn (shuffled rounds) to an idle process while wrk drives a static nginx, so every socket
# and scheduler event they see is someone else's. Reports, from the kernel's own accounting
# (kernel.bpf_stats_enabled), each program's ns per run for the two builds with the spread
# over rounds, and wrk's throughput under each. Needs root; loopback only; bounded.
#
#   sudo bench/compare_builds.sh OLD/qscope NEW/qscope [--rounds N=5] [--seconds S=4] [--spanning]
#
# qs_server comes from the new build's tree (NEW/../targets).
# --spanning: the idle target is a small process tree (a shell and two children) whose PIDs
# lie on both sides of nginx's, so nginx's events pass the new build's member-range check and
# are rejected by the bitmap: the process-tree filter's slower path. Without it the idle
# target's range holds no other process (the reject-by-range path).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_QSCOPE NEW_QSCOPE [--rounds N] [--seconds S]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2"); shift 2
SPANNING=0 rest=()
for a in "$@"; do [[ $a == --spanning ]] && SPANNING=1 || rest+=("$a"); done
set -- "${rest[@]+"${rest[@]}"}"
. bench/lib.sh
bench_args compare_builds "$@"
[[ " $* " == *" --seconds "* ]] || SECS=4
T=$(dirname "$NEW")/targets
bench_begin cmp

if [[ $SPANNING == 1 ]]; then
  # A shell forks one child before nginx starts and one after (on a line in the fifo).
  mkfifo "$work/fork"
  bash -c "sleep 3600 & read -r _ <'$work/fork'; sleep 3600 & wait" & pids+=($!); idle_pid=$!
  sleep 0.3
  bench_nginx "$work" 25180
  sleep 0.3
  echo go >"$work/fork"
  sleep 0.3
  kids=$(cat /proc/$idle_pid/task/*/children); for k in $kids; do pids+=("$k"); done
  echo "idle tree: $idle_pid $kids; nginx: $(cat "$work/nginx.pid") $(pgrep -P "$(cat "$work/nginx.pid")")" >&2
else
  bench_nginx "$work" 25180
  $T/qs_server --port 0 --workers 2 >"$work/idle.log" 2>&1 & pids+=($!); idle_pid=$!
  for _ in $(seq 200); do grep -q 'READY' "$work/idle.log" && break; sleep 0.05; done
fi

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
data, by_round = {}, {}
for which, r, name, v in rows:
    data.setdefault(name, {}).setdefault(which, []).append(float(v))
    by_round.setdefault(name, {}).setdefault(r, {})[which] = float(v)
def cell(vs):
    return "%.1f (%.1f..%.1f)" % (st.median(vs), min(vs), max(vs)) if vs else "-"
# Paired: both builds ran in the same round, minutes apart at most, so a round's ratio
# cancels what the machine was doing then; the spread of those ratios is the noise.
def paired(name):
    rs = [v["new"] / v["old"] for v in by_round[name].values() if v.get("old") and v.get("new")]
    return "%.2f (%.2f..%.2f, n=%d)" % (st.median(rs), min(rs), max(rs), len(rs)) if rs else "-"
print("| program (filtered out: attached to an idle process) | old: median (range) | new: median (range) | new/old, paired rounds: median (range) |")
print("|---|---|---|---|")
for name in sorted(data, key=lambda n: (n == "wrk_rps", n)):
    o, n = data[name].get("old", []), data[name].get("new", [])
    label = "wrk → nginx, requests/s" if name == "wrk_rps" else name + ", ns/run"
    print("| %s | %s | %s | %s |" % (label, cell(o), cell(n), paired(name)))
PY
