#!/usr/bin/env bash
# Wall time from `qscope top` starting to its exit after the first full frame
# (`--iterations 1` on a pseudo-terminal, as an operator would see it), N runs against one
# PID; prints median, p90, min and max in ms. Needs root. Bounded: N x ~2 s.
#   sudo bench/top_startup.sh --pid PID [--runs N=10] [-- extra qscope flags]
# Also prints, from `qscope top -v` (headless), where the time goes: the collector logs each
# source's start and the first tick on stderr.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
B=${QSCOPE_BUILD_DIR:-build}
[[ $B = /* ]] || B=$root/$B
PID="" RUNS=10 EXTRA=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --pid) PID=$2; shift 2;;
    --runs) RUNS=$2; shift 2;;
    --) shift; EXTRA=("$@"); break;;
    *) echo "usage: $0 --pid PID [--runs N] [-- qscope flags]" >&2; exit 2;;
  esac
done
[[ -n $PID ]] || { echo "usage: $0 --pid PID [--runs N] [-- qscope flags]" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "top_startup: needs root (BPF)" >&2; exit 1; }
out=$(mktemp /tmp/qscope-topstart-XXXXXX)
trap 'rm -f "$out" "$out.cpu"' EXIT
ms=() cpu=()
for _ in $(seq "$RUNS"); do
  t0=$(date +%s%N)
  # CPU (user+sys of qscope, via its `script` parent) is less at the mercy of a shared box
  # than wall time.
  TERM=xterm /usr/bin/time -o "$out.cpu" -f '%U %S' script -qec "$B/qscope top --pid $PID --iterations 1 ${EXTRA[*]}" /dev/null >"$out" 2>&1 || true
  c=$(tail -1 "$out.cpu")
  ms+=($(( ($(date +%s%N) - t0) / 1000000 )))
  cpu+=($(awk '{printf "%d", ($1 + $2) * 1000}' <<<"$c"))
  grep -q 'qscope' "$out" || { echo "no frame drawn:"; tail -c 400 "$out"; exit 1; }
done
stats() { sort -n | awk -v n="$RUNS" '{v[NR]=$1} END {
    p50 = (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
    i90 = int(0.9 * n + 0.999); if (i90 < 1) i90 = 1
    printf "median %d ms, p90 %d ms, min %d, max %d", p50, v[i90], v[1], v[n] }'; }
echo "first top frame, $(awk '/^Threads/{print $2}' /proc/"$PID"/status) threads: $(printf '%s\n' "${ms[@]}" | stats) (n=$RUNS; CPU $(printf '%s\n' "${cpu[@]}" | stats); load $(cut -d' ' -f1 /proc/loadavg))"
echo "phases (one headless run, -v):"
"$B/qscope" top --pid "$PID" --iterations 1 -v "${EXTRA[@]}" 2>&1 >/dev/null | grep -E '^qscope: (start|tick|first)' || true
