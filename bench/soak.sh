#!/usr/bin/env bash
# Soak: qscope attached to a loaded server for a long time must stay flat — memory (RSS)
# and BPF map occupancy — and keep answering. Needs root. Loopback only; bounded.
#
#   sudo bench/soak.sh [--minutes M | --seconds S] [--out FILE.tsv] [--port P] [--cgroup]
#     default 60 minutes; CI runs --minutes 2 in each mode, side by side (tests/soak_both.sh).
#   --cgroup: the server runs in a cgroup of its own (made and removed here) and qscope with
#     --scope cgroup, so arrivals come from the cgroup program (docs/kernel.md "Scoped to the
#     target's cgroup"); every sample must still say mode="cgroup".
#
# Setup: qs_downstream (1 ms) ← qs_server (16 workers, 2 ms service, pool of 4) ← two
# qs_load runs: 16 keep-alive connections plus 4 clients opening a new connection per
# request (connection churn exercises every per-connection map entry's create/delete).
# qscope runs `export` (the long-running mode) and /metrics is scraped every 5 s, as
# Prometheus would.
# Every 5 s: qscope's VmRSS and CPU time, the entry count of each of its hash maps
# (bpftool map dump), qscope_lost_events_total.
# Fails (exit 1) if, after the first minute (warm-up), RSS grows more than 10% over its
# value at 60 s, if hash-map occupancy grows more than 10% (+64 entries), if qscope's count
# of completed requests drifts more than 2% from the server's own over the same samples
# (flat and wrong is not a pass), or if qscope dies or /metrics stops answering.
# CI runs the 2-minute version (ctest extra.soak, both modes at once).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
SECS=3600 OUT="" PORT=24900 SCOPE=global
while [[ $# -gt 0 ]]; do
  case $1 in
    --minutes) SECS=$(( $2 * 60 )); shift 2;;
    --seconds) SECS=$2; shift 2;;
    --out) OUT=$2; shift 2;;
    --port) PORT=$2; shift 2;;
    --cgroup) SCOPE=cgroup; shift;;
    *) echo "usage: $0 [--minutes M | --seconds S] [--out FILE] [--port P] [--cgroup]" >&2; exit 2;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "soak: needs root (BPF)" >&2; exit 1; }
(( SECS >= 90 )) || { echo "soak: needs at least 90 s (60 s warm-up + samples)" >&2; exit 2; }
. bench/lib.sh
bench_build qscope qs_server qs_load qs_downstream
Q=$B/qscope T=$B/targets
work=$(mktemp -d /tmp/qscope-soak-XXXXXX)
# tmpfs: the server rewrites it every 10 ms; on disk that would be I/O in the target.
counters=/dev/shm/qscope-soak-$$.json
pids=() cgroups=()
trap 'bench_cleanup "$counters"' EXIT
# in_scope CMD...: CMD run in the server's cgroup from its first instruction (with --cgroup), so
# every socket it makes is charged there.
in_scope() { exec "$@"; }
if [[ $SCOPE == cgroup ]]; then
  bench_cgroup soak
  in_scope() { echo $BASHPID >"$bench_cg/cgroup.procs" && exec "$@"; }
fi

ready_port() { for _ in $(seq 200); do grep -q 'READY port=' "$1" 2>/dev/null && { sed -n 's/.*READY port=\([0-9]*\).*/\1/p' "$1" | head -1; return; }; sleep 0.05; done; echo "soak: not ready: $1" >&2; cat "$1" >&2; exit 1; }
rss_kib() { awk '/VmRSS/{print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14+$15)/hz}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Hash-type maps qscope holds (arrays and ring buffers have fixed occupancy).
held_hash_maps() {
  local ids
  ids=$(grep -h '^map_id:' /proc/"$1"/fdinfo/* 2>/dev/null | awk '{print $2}' | sort -un | tr '\n' ' ')
  for id in $ids; do
    bpftool -j map show id "$id" 2>/dev/null | jq -r 'select(.type|test("hash")) | "\(.id):\(.name)"'
  done
}
map_entries() { bpftool -j map dump id "$1" 2>/dev/null | jq 'length' 2>/dev/null || echo -1; }

"$T/qs_downstream" --port 0 --delay-ms 1 >"$work/ds.log" 2>&1 & pids+=($!)
ds_port=$(ready_port "$work/ds.log")
( in_scope "$T/qs_server" --port 0 --workers 16 --service-ms 2 --downstream "127.0.0.1:$ds_port" --pool 4 \
  --counters-file "$counters" ) >"$work/srv.log" 2>&1 & pids+=($!)
srv_pid=$!
srv_port=$(ready_port "$work/srv.log")
"$T/qs_load" --host 127.0.0.1 --port "$srv_port" --connections 16 --duration "$((SECS + 30))" \
  --out "$work/load-ka.json" >/dev/null 2>&1 & pids+=($!)
"$T/qs_load" --host 127.0.0.1 --port "$srv_port" --connections 4 --duration "$((SECS + 30))" \
  --new-conn-per-request --out "$work/load-new.json" >/dev/null 2>&1 & pids+=($!)

# Under ASan (the test build) freed memory waits in a 256 MiB quarantine before reuse: RSS
# would climb for minutes with no leak at all. A 1 MiB quarantine keeps the RSS bound as
# tight as in a release build (which ignores the variable).
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1" \
  "$Q" export --pid "$srv_pid" --scope "$SCOPE" --listen "127.0.0.1:$PORT" >"$work/qscope.out" 2>"$work/qscope.err" & pids+=($!)
q_pid=$!
for _ in $(seq 300); do
  curl -fsS -m 2 "http://127.0.0.1:$PORT/metrics" >/dev/null 2>&1 && break
  kill -0 "$q_pid" 2>/dev/null || { echo "soak: qscope died at start:" >&2; cat "$work/qscope.err" >&2; exit 1; }
  sleep 0.2
done
# /metrics is served before the probes load (bind first, then attach): wait for programs.
for _ in $(seq 300); do
  grep -qs '^prog_id:' /proc/"$q_pid"/fdinfo/* && break
  sleep 0.2
done
sleep 2
maps=$(held_hash_maps "$q_pid")
[[ -n $maps ]] || { echo "soak: qscope holds no hash maps: did it attach?" >&2; cat "$work/qscope.err" >&2; exit 1; }
echo "soak: ${SECS}s, --scope $SCOPE; server pid $srv_pid port $srv_port; qscope pid $q_pid; hash maps: ${maps:-none}" >&2

tsv=${OUT:-$work/soak.tsv}
printf 't_s\trss_kib\tcpu_s\tmap_entries\tlost_events\tserver_completed\tqscope_completed\t%s\n' "$(echo $maps | tr ' ' '\t')" >"$tsv"
start=$SECONDS
base_rss=0 base_maps=-1 max_rss=0 max_maps=0 failures=""
base_srv=-1 base_q=-1 last_srv=-1 last_q=-1
while (( SECONDS - start < SECS )); do
  sleep 5
  t=$((SECONDS - start))
  if ! kill -0 "$q_pid" 2>/dev/null; then failures+="qscope exited at ${t}s; "; break; fi
  metrics=$(curl -fsS -m 5 "http://127.0.0.1:$PORT/metrics" 2>/dev/null) || { failures+="/metrics failed at ${t}s; "; metrics=""; }
  if [[ -n $metrics ]] && ! grep -q "^qscope_sock_scope_info{mode=\"$SCOPE\"" <<<"$metrics"; then
    failures+="arrivals not in mode $SCOPE at ${t}s ($(grep '^qscope_sock_scope_info' <<<"$metrics")); "
  fi
  lost=$(awk '/^qscope_lost_events_total/{s+=$2} END{printf "%d", s}' <<<"$metrics")
  rss=$(rss_kib "$q_pid")
  total=0 per=""
  for m in $maps; do
    n=$(map_entries "${m%%:*}")
    per+=$'\t'"$n"
    (( n > 0 )) && total=$((total + n))
  done
  done_reqs=$(jq -r '.completed' "$counters" 2>/dev/null || echo -1)
  q_done=$(awk '/^qscope_requests_completed_total/{s+=$2} END{printf "%d", s}' <<<"$metrics")
  printf '%d\t%d\t%s\t%d\t%d\t%s\t%s%s\n' "$t" "$rss" "$(cpu_s "$q_pid")" "$total" "$lost" "$done_reqs" "$q_done" "$per" >>"$tsv"
  if [[ -n $metrics && $done_reqs =~ ^[0-9]+$ ]]; then
    (( base_srv < 0 )) && base_srv=$done_reqs base_q=$q_done
    last_srv=$done_reqs last_q=$q_done
  fi
  if (( t >= 60 )); then
    if (( base_rss == 0 )); then base_rss=$rss base_maps=$total; fi
    (( rss > max_rss )) && max_rss=$rss
    (( total > max_maps )) && max_maps=$total
  fi
done

kill -INT "$q_pid" 2>/dev/null || true
for _ in $(seq 100); do kill -0 "$q_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$q_pid" 2>/dev/null && failures+="qscope did not exit within 10 s of SIGINT; "

column -t "$tsv" | awk 'NR==1 || NR%12==2' >&2   # one line a minute
if (( base_rss > 0 )); then
  limit=$(( base_rss * 110 / 100 ))
  echo "soak: RSS at 60 s ${base_rss} KiB, max after ${max_rss} KiB (limit ${limit})" >&2
  (( max_rss > limit )) && failures+="RSS grew ${base_rss}→${max_rss} KiB (>10%); "
  mlimit=$(( base_maps * 110 / 100 + 64 ))
  echo "soak: hash-map entries at 60 s ${base_maps}, max after ${max_maps} (limit ${mlimit})" >&2
  (( max_maps > mlimit )) && failures+="map occupancy grew ${base_maps}→${max_maps}; "
else
  failures+="no sample after the first minute; "
fi
if (( base_srv >= 0 && last_srv > base_srv )); then
  d_srv=$((last_srv - base_srv)) d_q=$((last_q - base_q))
  echo "soak: completed requests from the first to the last sample: server ${d_srv}, qscope ${d_q}" >&2
  (( d_q * 100 < d_srv * 98 || d_q * 100 > d_srv * 102 )) &&
    failures+="qscope counted ${d_q} completed requests, the server ${d_srv} (>2% apart); "
else
  failures+="the server completed nothing (load not running?); "
fi
[[ -n $OUT ]] && echo "soak: samples in $OUT" >&2
if [[ -n $failures ]]; then
  echo "soak: FAIL: $failures" >&2
  cat "$work/qscope.err" >&2
  exit 1
fi
echo "soak: PASS" >&2
