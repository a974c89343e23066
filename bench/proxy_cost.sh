#!/usr/bin/env bash
# Two qscope builds side by side on a target that calls out: nginx (one worker) proxying each
# request over a keep-alive upstream to a second nginx, wrk driving the front. Each build is
# attached in turn (alternating rounds) to the front worker, whose reads and writes then run
# the request path AND the calls-per-request path (bpf/req_ctx.h: a map look-up when a request
# begins, when it is answered and per call). Reports each sock program's ns per run (the
# kernel's own accounting, kernel.bpf_stats_enabled) per build with the spread over rounds,
# and wrk's requests/s under each. Needs root; loopback only; bounded.
#
#   sudo bench/proxy_cost.sh OLD/qscope NEW/qscope [--rounds N=5] [--seconds S=5]
#   CLIENTS=1: one client at a time, so every request is tied to its calls (with more, the
#   loop's requests overlap and qscope says fan-out is unknown: the look-ups still run).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_QSCOPE NEW_QSCOPE [--rounds N] [--seconds S]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2"); shift 2
. bench/lib.sh
bench_args proxy_cost "$@"
CLIENTS=${CLIENTS:-8}
bench_begin proxy
sysctl -qw kernel.bpf_stats_enabled=1

front=28480 back=28481
mkdir -p "$work/back/logs" "$work/front/logs"
cat >"$work/back.conf" <<NGX
worker_processes 1;
pid $work/back.pid;
error_log $work/back/logs/error.log warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 100000000;
       server { listen 127.0.0.1:$back backlog=1024; location / { return 200 "ok"; } } }
NGX
cat >"$work/nginx.conf" <<NGX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/front/logs/error.log warn;
events { worker_connections 1024; }
http { access_log off;
       upstream be { server 127.0.0.1:$back; keepalive 64; keepalive_requests 100000000; }
       server { listen 127.0.0.1:$front backlog=1024;
                location / { proxy_pass http://be; proxy_http_version 1.1; proxy_set_header Connection ""; } } }
NGX
nginx -c "$work/back.conf" -p "$work/back"
nginx -c "$work/nginx.conf" -p "$work/front"
sleep 0.5
pids+=("$(cat "$work/back.pid")")   # bench_cleanup stops the front (nginx.pid) itself
worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
[[ -n $worker ]] || { echo "proxy_cost: no front nginx worker" >&2; exit 1; }
curl -sf -o /dev/null "http://127.0.0.1:$front/" || { echo "proxy_cost: the proxy does not answer" >&2; exit 1; }

# one round: BUILD attached to the front worker for SECS under wrk; prints "prog ns/run" lines
# and "rps N"
round() {
  local bin=$1 qs s0 s1
  "$bin" snapshot --pid "$worker" --duration 3600 >/dev/null 2>"$work/qs.err" &
  qs=$!; int_pids+=("$qs")
  sleep 4   # attached and seeded
  s0=$(prog_stats "$qs")
  wrk -t1 -c"$CLIENTS" -d"${SECS}s" "http://127.0.0.1:$front/" >"$work/wrk.out" 2>&1
  s1=$(prog_stats "$qs")
  kill -INT "$qs"; wait "$qs" 2>/dev/null || true
  sock_prog_delta "$s0" "$s1"
  awk '/Requests\/sec/{print "rps", $2}' "$work/wrk.out"
}

declare -A ns_old ns_new
rps_old=() rps_new=()
for ((r = 1; r <= ROUNDS; r++)); do
  order=(old new); (( r % 2 == 0 )) && order=(new old)
  for which in "${order[@]}"; do
    bin=$OLD; [[ $which == new ]] && bin=$NEW
    while read -r name v _; do
      if [[ $name == rps ]]; then
        [[ $which == old ]] && rps_old+=("$v") || rps_new+=("$v")
      elif [[ $which == old ]]; then ns_old[$name]+="$v "
      else ns_new[$name]+="$v "; fi
    done < <(round "$bin")
  done
done

med() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{a[NR]=$1} END{if (NR) printf "%s (%s..%s)", a[int((NR+1)/2)], a[1], a[NR]; else printf "-"}'; }
{
  echo "proxy_cost: nginx proxy, $CLIENTS wrk clients, $ROUNDS rounds of ${SECS}s per build, alternating"
  printf '%-16s %-26s %-26s\n' program "old ns/run" "new ns/run"
  for n in $(printf '%s\n' "${!ns_new[@]}" "${!ns_old[@]}" | sort -u); do
    printf '%-16s %-26s %-26s\n' "$n" "$(echo "${ns_old[$n]:-}" | med)" "$(echo "${ns_new[$n]:-}" | med)"
  done
  printf '%-16s %-26s %-26s\n' "wrk req/s" "$(echo "${rps_old[*]}" | med)" "$(echo "${rps_new[*]}" | med)"
} | tee ${OUT:+"$OUT"}
