#!/usr/bin/env bash
# Wall time from `qscope top` starting to its first full frame (`--iterations 1` on a
# pseudo-terminal, as an operator would see it: the moment top hands the terminal back, right
# after that frame, from script's output timing) and to its exit (which also waits for the
# kernel to detach every probe), N runs against one PID; prints median, p90, min and max in
# ms. Needs root. Bounded: N x ~2 s.
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
trap 'rm -f "$out" "$out.cpu" "$out.log" "$out.timing"' EXIT
# When the terminal was handed back: the offset of curses' "leave the alternate screen" in
# script's log (after its one-line header), found in the timing file's chunk sizes.
handed_back_ms() {
  local at head
  at=$(grep -abo $'\x1b\[?1049l' "$out.log" | head -1 | cut -d: -f1)
  head=$(head -1 "$out.log" | wc -c)
  [[ -n $at ]] || { echo "no frame drawn:"; tail -c 400 "$out.log"; exit 1; } >&2
  awk -v at=$((at - head)) '{ t += $1; n += $2; if (n > at) { printf "%d", t * 1000; exit } }' "$out.timing"
}
ms=() shown=() cpu=()
for _ in $(seq "$RUNS"); do
  t0=$(date +%s%N)
  # CPU (user+sys of qscope, via its `script` parent) is less at the mercy of a shared box
  # than wall time.
  TERM=xterm /usr/bin/time -o "$out.cpu" -f '%U %S' script -q --log-out "$out.log" --log-timing "$out.timing" \
    -ec "$B/qscope top --pid $PID --iterations 1 ${EXTRA[*]}" >"$out" 2>&1 || true
  c=$(tail -1 "$out.cpu")
  ms+=($(( ($(date +%s%N) - t0) / 1000000 )))
  cpu+=($(awk '{printf "%d", ($1 + $2) * 1000}' <<<"$c"))
  grep -q 'qscope' "$out" || { echo "no frame drawn:"; tail -c 400 "$out"; exit 1; }
  shown+=($(handed_back_ms))
done
stats() { sort -n | awk -v n="$RUNS" '{v[NR]=$1} END {
    p50 = (n % 2) ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
    i90 = int(0.9 * n + 0.999); if (i90 < 1) i90 = 1
    printf "median %d ms, p90 %d ms, min %d, max %d", p50, v[i90], v[1], v[n] }'; }
threads=$(awk '/^Threads/{print $2}' /proc/"$PID"/status)
echo "first top frame shown, $threads threads: $(printf '%s\n' "${shown[@]}" | stats) (n=$RUNS)"
echo "start to exit after it, $threads threads: $(printf '%s\n' "${ms[@]}" | stats) (n=$RUNS; CPU $(printf '%s\n' "${cpu[@]}" | stats); load $(cut -d' ' -f1 /proc/loadavg))"
echo "phases (one headless run, -v):"
"$B/qscope" top --pid "$PID" --iterations 1 -v "${EXTRA[@]}" 2>&1 >/dev/null | grep -E '^qscope: (start|tick|first)' || true
