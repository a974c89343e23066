#!/usr/bin/env bash
# Two qscope builds side by side on an HTTP/2 target: nginx (one worker) speaking cleartext
# HTTP/2 with prior knowledge (h2c), h2load driving it over 2 connections of 50 concurrent
# streams. Each build is attached in turn (alternating rounds) to the worker, whose reads and
# writes then run, in a build that follows HTTP/2 streams, the frame walk (bpf/sock.bpf.c
# h2_walk_syscall: every frame header of the syscall's bytes, stepped in bpf_loop; bpf/h2.h).
# A third condition per round runs h2load with no qscope attached. Reports each sock program's
# ns per run (the kernel's own accounting, kernel.bpf_stats_enabled, on in every condition) per
# build with the spread over rounds, h2load's requests/s under each, the frames per program
# run, and from them the cost per frame: (new - old ns/run) / frames per run, for qs_recv and
# qs_send. Needs root; loopback only; bounded.
#
#   sudo bench/h2_cost.sh OLD/qscope NEW/qscope [--rounds N=5] [--seconds S=5]
#   OUT=FILE: also write the table there. BASELINE=0: no no-qscope condition.
#
# Frames are counted from h2load's own count, not from the walk: each request is one HEADERS
# frame nginx reads and two frames it writes (HEADERS, then DATA with END_STREAM), so frames
# read per qs_recv run ~ requests / qs_recv runs and frames written per qs_send run ~
# 2 x requests / qs_send runs, over the same interval (the few SETTINGS, WINDOW_UPDATE and
# connection-preface frames are left out). A program's runs are all of its runs on the host,
# h2load's own reads and writes (and any other process's) included, which return at the
# target check: frames per run is per run of the program, not per walk, and the ns/run of both
# builds are averaged over the same mix. Because the batching (frames per syscall) moves from
# round to round, the script also derives the cost from ns per request (ns/run x runs /
# requests: all of the program's time over the interval) and (new - old) / 1 frame read or
# 2 frames written per request. A build that follows streams also reports its own stream
# count and lost frame boundaries (JSON requests.h2), printed per round, then one line per round.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[[ $# -ge 2 ]] || { echo "usage: $0 OLD_QSCOPE NEW_QSCOPE [--rounds N] [--seconds S]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2"); shift 2
. bench/lib.sh
out_env=${OUT:-}
bench_args h2_cost "$@"
OUT=${OUT:-$out_env}   # bench_args clears OUT (its --out); OUT= in the environment works too
BASELINE=${BASELINE:-1}
CONNS=2 STREAMS=50
command -v h2load >/dev/null || { echo "h2_cost: needs h2load (Debian: nghttp2-client)" >&2; exit 1; }
bench_begin h2
sysctl -qw kernel.bpf_stats_enabled=1

port=28490
mkdir -p "$work/nginx/logs"
# keepalive_requests: HTTP/2 follows it since nginx 1.19.7; at the default 1000 nginx sends
# GOAWAY after 1000 streams and h2load's connection stops.
cat >"$work/nginx.conf" <<NGX
worker_processes 1;
pid $work/nginx.pid;
error_log $work/nginx/logs/error.log warn;
events { worker_connections 1024; }
http { access_log off; keepalive_requests 100000000;
       server { listen 127.0.0.1:$port http2 backlog=1024; location / { return 200 "ok"; } } }
NGX
nginx -c "$work/nginx.conf" -p "$work/nginx"
sleep 0.5
worker=$(pgrep -P "$(cat "$work/nginx.pid")" | head -1)
[[ -n $worker ]] || { echo "h2_cost: no nginx worker" >&2; exit 1; }
h2load -n 10 -c 1 "http://127.0.0.1:$port/" 2>&1 | grep -q "10 succeeded" ||
  { echo "h2_cost: nginx does not answer h2c" >&2; exit 1; }

# h2load for SECS; prints "rps N" and "reqs N" (succeeded)
load() {
  timeout $((SECS + 30)) h2load -c "$CONNS" -m "$STREAMS" -D "$SECS" "http://127.0.0.1:$port/" \
    >"$work/h2load.out" 2>&1 || true
  awk '/^finished in/{gsub(",", "", $4); print "rps", $4}
       /^requests:/{for (i = 2; i < NF; i++) if ($(i + 1) ~ /^succeeded/) print "reqs", $i}' \
    "$work/h2load.out"
}

# one round of build BIN (or none): attached to the worker for SECS under h2load; prints
# "prog NAME NS_PER_RUN RUNS" lines, "rps N", "reqs N" and, when the build reports HTTP/2,
# "h2 followed N completed N lost_sync N"
round() {
  local bin=$1 qs s0 s1
  if [[ $bin == none ]]; then load; return; fi
  "$bin" snapshot --pid "$worker" --duration 3600 --json >"$work/qs.json" 2>"$work/qs.err" &
  qs=$!; int_pids+=("$qs")
  sleep 4   # attached and seeded
  s0=$(prog_stats "$qs")
  load
  s1=$(prog_stats "$qs")
  kill -INT "$qs"; wait "$qs" 2>/dev/null || true
  sock_prog_delta "$s0" "$s1" | sed 's/^/prog /'
  python3 - "$work/qs.json" <<'PY'
import json, sys
try:
    r = json.load(open(sys.argv[1]))["requests"]
    h = r["h2"]
    print("h2 followed", h["followed_connections"], "completed", r["completed"], "lost_sync", h["lost_sync"])
except Exception:
    pass
PY
}

declare -A ns_old ns_new runs_old runs_new
rps_old=() rps_new=() rps_none=() req_old=() req_new=() req_none=() h2_rep=()
fin_old=() fin_new=() fout_old=() fout_new=() pf_recv=() pf_send=()
rq_old=() rq_new=() sq_old=() sq_new=() pq_recv=() pq_send=() per_round=()
for ((r = 1; r <= ROUNDS; r++)); do
  order=(old new); (( r % 2 == 0 )) && order=(new old)
  (( BASELINE )) && { (( r % 3 == 1 )) && order=(none "${order[@]}") || order+=(none); }
  declare -A ns_r=() runs_r=() req_r=() rps_r=()
  for which in "${order[@]}"; do
    bin=none; [[ $which == old ]] && bin=$OLD; [[ $which == new ]] && bin=$NEW
    while read -r kind a b c d _ f; do
      case $kind in
        rps) eval "rps_$which+=(\"\$a\")"; rps_r[$which]=$a;;
        reqs) eval "req_$which+=(\"\$a\")"; req_r[$which]=$a;;
        prog)
          ns_r[$which.$a]=$b runs_r[$which.$a]=$c
          if [[ $which == old ]]; then ns_old[$a]+="$b " runs_old[$a]+="$c "
          else ns_new[$a]+="$b " runs_new[$a]+="$c "; fi;;
        h2) h2_rep+=("$which build, round $r: HTTP/2 connections followed $b, requests (streams) completed $d, lost_sync $f; h2load succeeded ${req_r[$which]:-?}");;
      esac
    done < <(round "$bin")
  done
  # this round's frames per run and ns per request (all of a program's runs over the
  # requests), per build; paired within the round, the extra ns per frame both ways
  read -r -a v < <(python3 - "${req_r[old]:-}" "${req_r[new]:-}" \
    "${ns_r[old.qs_recv]:-}" "${runs_r[old.qs_recv]:-}" "${ns_r[new.qs_recv]:-}" "${runs_r[new.qs_recv]:-}" \
    "${ns_r[old.qs_send]:-}" "${runs_r[old.qs_send]:-}" "${ns_r[new.qs_send]:-}" "${runs_r[new.qs_send]:-}" <<'PY'
import sys
a = [float(x) if x else 0.0 for x in sys.argv[1:]]
qo, qn, rno, rco, rnn, rcn, sno, sco, snn, scn = a
f = lambda x: "%.2f" % x
out = []
for q, rc, sc in ((qo, rco, sco), (qn, rcn, scn)):            # frames per run
    out += [f(q / rc) if q and rc else "-", f(2 * q / sc) if q and sc else "-"]
for q, ns, rc, sns, sc in ((qo, rno, rco, sno, sco), (qn, rnn, rcn, snn, scn)):   # ns per request
    out += [f(ns * rc / q) if q else "-", f(sns * sc / q) if q else "-"]
ok = qo and qn and rco and rcn and sco and scn
# (new - old ns/run) / new frames per run; (new - old ns per request) / frames per request
out += [f((rnn - rno) / (qn / rcn)) if ok else "-", f((snn - sno) / (2 * qn / scn)) if ok else "-",
        f(rnn * rcn / qn - rno * rco / qo) if ok else "-",
        f((snn * scn / qn - sno * sco / qo) / 2) if ok else "-"]
print(" ".join(out))
PY
  )
  fin_old+=("${v[0]}") fout_old+=("${v[1]}") fin_new+=("${v[2]}") fout_new+=("${v[3]}")
  rq_old+=("${v[4]}") sq_old+=("${v[5]}") rq_new+=("${v[6]}") sq_new+=("${v[7]}")
  pf_recv+=("${v[8]}") pf_send+=("${v[9]}") pq_recv+=("${v[10]}") pq_send+=("${v[11]}")
  per_round+=("round $r (${order[*]}): req/s old ${rps_r[old]:-} new ${rps_r[new]:-} none ${rps_r[none]:--}; qs_recv ns/run ${ns_r[old.qs_recv]:-} -> ${ns_r[new.qs_recv]:-}, qs_send ${ns_r[old.qs_send]:-} -> ${ns_r[new.qs_send]:-}; ns per frame (per request) recv ${v[10]} send ${v[11]}")
  unset ns_r runs_r req_r rps_r
done

med() { tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{a[NR]=$1} END{if (NR) printf "%s (%s..%s)", a[int((NR+1)/2)], a[1], a[NR]; else printf "-"}'; }
medv() { tr ' ' '\n' | grep -v '^-\?$' | sort -g | awk '{a[NR]=$1} END{if (NR) print a[int((NR+1)/2)]}'; }
{
  echo "h2_cost: nginx h2c (one worker), h2load -c $CONNS -m $STREAMS, $ROUNDS rounds of ${SECS}s per build, alternating; bpf_stats on"
  printf '%-16s %-26s %-26s %-36s\n' program "old ns/run" "new ns/run" "runs old / new (median)"
  for n in $(printf '%s\n' "${!ns_new[@]}" "${!ns_old[@]}" | sort -u); do
    printf '%-16s %-26s %-26s %-36s\n' "$n" "$(echo "${ns_old[$n]:-}" | med)" "$(echo "${ns_new[$n]:-}" | med)" \
      "$(echo "${runs_old[$n]:-}" | medv) / $(echo "${runs_new[$n]:-}" | medv)"
  done
  printf '%-16s %-26s %-26s\n' "h2load req/s" "$(echo "${rps_old[*]}" | med)" "$(echo "${rps_new[*]}" | med)"
  printf '%-16s %-26s %-26s\n' "h2load requests" "$(echo "${req_old[*]}" | med)" "$(echo "${req_new[*]}" | med)"
  (( BASELINE )) && printf '%-16s %-26s\n' "no qscope req/s" "$(echo "${rps_none[*]}" | med)"
  echo
  printf '%-44s %-26s %-26s\n' "frames per run (from h2load's count)" old new
  printf '%-44s %-26s %-26s\n' "read per qs_recv run (requests/runs)" "$(echo "${fin_old[*]}" | med)" "$(echo "${fin_new[*]}" | med)"
  printf '%-44s %-26s %-26s\n' "written per qs_send run (2 x requests/runs)" "$(echo "${fout_old[*]}" | med)" "$(echo "${fout_new[*]}" | med)"
  echo
  printf '%-44s %-26s %-26s\n' "qs_recv ns per request (ns/run x runs/reqs)" "$(echo "${rq_old[*]}" | med)" "$(echo "${rq_new[*]}" | med)"
  printf '%-44s %-26s %-26s\n' "qs_send ns per request (ns/run x runs/reqs)" "$(echo "${sq_old[*]}" | med)" "$(echo "${sq_new[*]}" | med)"
  echo
  echo "extra ns per frame, new vs. old, paired within each round, median (range):"
  printf '  %-60s qs_recv %-22s qs_send %s\n' "(new - old ns/run) / frames per run (new)" \
    "$(echo "${pf_recv[*]}" | med)" "$(echo "${pf_send[*]}" | med)"
  printf '  %-60s qs_recv %-22s qs_send %s\n' "(new - old ns per request) / frames per request (1 in, 2 out)" \
    "$(echo "${pq_recv[*]}" | med)" "$(echo "${pq_send[*]}" | med)"
  python3 - "$(echo "${ns_old[qs_recv]:-}" | medv)" "$(echo "${ns_new[qs_recv]:-}" | medv)" \
    "$(echo "${fin_new[*]}" | medv)" "$(echo "${ns_old[qs_send]:-}" | medv)" \
    "$(echo "${ns_new[qs_send]:-}" | medv)" "$(echo "${fout_new[*]}" | medv)" <<'PY'
import sys
v = sys.argv[1:]
for name, (o, n, f) in (("qs_recv", v[0:3]), ("qs_send", v[3:6])):
    if o and n and f:
        o, n, f = float(o), float(n), float(f)
        print("  from the medians, %s: (%.1f - %.1f) / %.2f = %.1f ns per frame" % (name, n, o, f, (n - o) / f))
PY
  for l in "${h2_rep[@]}"; do echo "qscope's own count, $l"; done
  for l in "${per_round[@]}"; do echo "$l"; done
} | tee ${OUT:+"$OUT"}
