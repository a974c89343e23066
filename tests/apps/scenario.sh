#!/bin/bash
# One scenario of issue 7, end to end: PostgreSQL, the Tomcat app in a profile, a spike of
# clients (wrk), qscope attached mid-spike, and the oracles nobody here wrote sampled during
# the same window. Everything lands in OUTDIR for the integration test and the docs.
#
# usage: scenario.sh PROFILE OUTDIR
#   PROFILE  platform | virtual | gated   (/db load)   or   partner   (silent partner, /quote)
#
# Environment (defaults in brackets):
#   QSCOPE        qscope binary; "none" runs load and oracles only       [REPO/build/qscope]
#   QS_DOWNSTREAM qs_downstream binary for the silent partner            [dir of QSCOPE/targets]
#   PG_DIR        a cluster started by pg.sh (kept running); else one is started in OUTDIR/pg
#                 and stopped at the end
#   CLIENTS       concurrent wrk connections            [2000; partner: 400]
#   THINK_MS      pause before each request per client  [500]
#   RAMP          seconds of load before qscope attaches [4]
#   WINDOW        qscope snapshot --duration            [8]
#   APP_BUILD     where the app's classes go (shared between runs)   [OUTDIR/app-build]
#   QS_REPORT=1   also a text report snapshot (after the JSON one, same spike)
#   QS_TUI=1      also a `qscope top` screen captured with tmux
#   APP_PORT [23080]  PG_PORT [23432]  PARTNER_PORT [23090]  POOL_TIMEOUT_MS [3000]
#
# Outputs in OUTDIR: qscope.json (+ .err, qscope.txt, top.txt), wrk.out + wrk.json (the
# load tool's own counts), stats-start.json / stats-end.json / stats.jsonl (the app's own
# counters), samples.tsv (pg_stat_activity, ss, /proc per 0.5 s), jstack.txt (+ vthreads.json),
# jfr.txt (virtual), probes.txt (curl: status and latency per request), app.log, env.txt.
set -uo pipefail

profile=${1:-}; out=${2:-}
case "$profile" in platform|virtual|gated|partner) ;; *)
    echo "usage: scenario.sh platform|virtual|gated|partner OUTDIR" >&2; exit 2 ;;
esac
[ -n "$out" ] || { echo "scenario.sh: OUTDIR missing" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
QSCOPE=${QSCOPE:-$repo/build/qscope}
QS_DOWNSTREAM=${QS_DOWNSTREAM:-$(dirname "$QSCOPE")/targets/qs_downstream}
APP_PORT=${APP_PORT:-23080}
PG_PORT=${PG_PORT:-23432}
PARTNER_PORT=${PARTNER_PORT:-23090}
POOL_TIMEOUT_MS=${POOL_TIMEOUT_MS:-3000}
THINK_MS=${THINK_MS:-500}
RAMP=${RAMP:-4}
WINDOW=${WINDOW:-8}
if [ "$profile" = partner ]; then CLIENTS=${CLIENTS:-400}; else CLIENTS=${CLIENTS:-2000}; fi

log() { echo "[scenario $profile $(date +%T)] $*" >&2; }
die() { echo "scenario.sh: $*" >&2; exit 1; }

command -v wrk >/dev/null || die "wrk not found (apt-get install wrk)"
if [ "$QSCOPE" != none ] && [ ! -x "$QSCOPE" ]; then die "no qscope binary at $QSCOPE (set QSCOPE=)"; fi
# Each client holds a socket in wrk and in the JVM.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

pids=()
own_pg=""
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
    [ -n "${tmux_sock:-}" ] && tmux -S "$tmux_sock" kill-server 2>/dev/null
    [ -n "$own_pg" ] && "$here/pg.sh" stop "$own_pg"
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- PostgreSQL --------------------------------------------------------------------------
if [ -z "${PG_DIR:-}" ]; then
    own_pg="$out/pg"
    chmod o+x "$out"   # the server runs as postgres
    PG_DIR=$own_pg
fi
"$here/pg.sh" start "$PG_DIR" "$PG_PORT" || die "PostgreSQL did not start"
pgq() { "$here/pg.sh" psql "$PG_DIR" "$PG_PORT" -c "$1" 2>/dev/null; }

# ---- the app -----------------------------------------------------------------------------
envfile=$("$here/tomcat/build.sh" "${APP_BUILD:-$out/app-build}") || die "app build failed"
# shellcheck disable=SC1090
. "$envfile"
rm -f "$out"/*.json "$out"/*.txt "$out"/*.tsv "$out"/*.jsonl "$out"/*.jfr 2>/dev/null

if [ "$profile" = partner ]; then
    [ -x "$QS_DOWNSTREAM" ] || die "no qs_downstream at $QS_DOWNSTREAM (set QS_DOWNSTREAM=)"
    "$QS_DOWNSTREAM" --port "$PARTNER_PORT" --addr 127.0.0.1 --silent >"$out/partner.log" 2>&1 &
    pids+=($!)
fi

app_profile=$profile; [ "$profile" = partner ] && app_profile=platform
"$JAVA_HOME/bin/java" -Xms256m -Xmx512m -Dqs.profile="$app_profile" -Dqs.port="$APP_PORT" \
    -Dqs.pg=127.0.0.1:"$PG_PORT" -Dqs.partner=127.0.0.1:"$PARTNER_PORT" -Dqs.poolTimeoutMs="$POOL_TIMEOUT_MS" \
    -Dqs.stats="$out/stats-live.json" -Dqs.baseDir="$out/tomcat-base" \
    -cp "$CLASSPATH" qscope.scenario.ScenarioApp >"$out/app.log" 2>&1 &
app=$!
pids+=("$app")
echo "$app" >"$out/app.pid"
for _ in $(seq 150); do
    curl -sf -m 1 -o /dev/null "http://127.0.0.1:$APP_PORT/ping" && break
    kill -0 "$app" 2>/dev/null || { cat "$out/app.log" >&2; die "the app exited"; }
    sleep 0.2
done
curl -sf -m 2 -o /dev/null "http://127.0.0.1:$APP_PORT/ping" || { tail "$out/app.log" >&2; die "the app does not answer /ping"; }
if [ "$profile" != partner ]; then
    # Warm the JIT and prove the pool works before the spike.
    for _ in 1 2 3 4 5; do curl -sf -m 5 -o /dev/null "http://127.0.0.1:$APP_PORT/db" || die "/db fails before the spike"; done
fi
{
    echo "profile=$profile app_profile=$app_profile clients=$CLIENTS think_ms=$THINK_MS ramp=$RAMP window=$WINDOW"
    echo "pool=10 pool_timeout_ms=$POOL_TIMEOUT_MS gate=10 max_threads=200 app_port=$APP_PORT pg_port=$PG_PORT partner_port=$PARTNER_PORT"
    echo "java=$JAVA_HOME app_pid=$app"
} >"$out/env.txt"

# ---- oracles -----------------------------------------------------------------------------
# samples.tsv: one line per 0.5 s:
#   t  pg_active pg_conns  app_conns_with_unread accept_queue  pg_estab partner_estab
#   http_threads http_futex  (comm http-nio*, and those in futex per /proc/TID/syscall)
sampler() {
    local t0 end now
    t0=$(date +%s%3N); end=$((t0 + $1 * 1000))
    while :; do
        now=$(date +%s%3N)
        [ "$now" -gt "$end" ] && break
        local pg ssapp lq pge pe th
        pg=$(pgq "select count(*) filter (where state = 'active'), count(*) from pg_stat_activity where application_name = 'qscope-scenario'" | tr '|' '\t')
        [ -n "$pg" ] || pg=$'-1\t-1'
        ssapp=$(ss -Htn state established "( sport = :$APP_PORT )" | awk '$1 > 0' | wc -l)
        lq=$(ss -Hltn "( sport = :$APP_PORT )" | awk '{print $2; exit}')
        pge=$(ss -Htn state established "( dport = :$PG_PORT )" | wc -l)
        pe=$(ss -Htn state established "( dport = :$PARTNER_PORT )" | wc -l)
        # comm and syscall per thread, joined on the task directory
        th=$(cd "/proc/$app/task" 2>/dev/null && grep -s -H . */comm */syscall | awk -F: '
            { split($1, p, "/"); tid = p[1]
              if (p[2] == "comm") comm[tid] = $2; else { split($2, s, " "); sc[tid] = s[1] } }
            END { n = 0; f = 0
                  for (t in comm) if (comm[t] ~ /^http-nio/) { n++; if (sc[t] == "202") f++ }
                  printf "%d\t%d", n, f }')
        printf '%d.%03d\t%s\t%s\t%s\t%s\t%s\t%s\n' $(((now - t0) / 1000)) $(((now - t0) % 1000)) "$pg" "$ssapp" "${lq:-0}" "$pge" "$pe" "$th"
        cat "$out/stats-live.json" >>"$out/stats.jsonl" 2>/dev/null
        sleep 0.5
    done
}

# A few sequential clients measuring status and latency of single requests: the per-status
# latency wrk does not give.
prober() {
    local path=$1 end=$(( $(date +%s) + $2 ))
    while [ "$(date +%s)" -lt "$end" ]; do
        curl -s -o /dev/null -m 20 -w '%{http_code} %{time_total}\n' "http://127.0.0.1:$APP_PORT$path"
        sleep 0.3
    done
}

jstack_summary() {
    "$JAVA_HOME/bin/jcmd" "$app" Thread.print >"$out/jstack.txt" 2>&1
    if [ "$app_profile" != platform ]; then
        "$JAVA_HOME/bin/jcmd" "$app" Thread.dump_to_file -format=json -overwrite "$out/vthreads.json" >/dev/null 2>&1
    fi
}

# ---- the spike ---------------------------------------------------------------------------
extra=0
[ "${QS_REPORT:-0}" = 1 ] && extra=$((extra + 6))
[ "${QS_TUI:-0}" = 1 ] && extra=$((extra + 6))
if [ "$profile" = partner ]; then
    path=/ping; quote_pct=20
    # attach before the spike: qscope sees every partner call from its first byte
    wrk_secs=$((WINDOW + extra + 2))
else
    path=/db; quote_pct=0
    wrk_secs=$((RAMP + WINDOW + extra + 3))
fi

if [ "$profile" = virtual ]; then
    # jdk.CPULoad proves the recording ran; the count that matters is VirtualThreadPinned.
    "$JAVA_HOME/bin/jcmd" "$app" JFR.start name=qspin settings=none \
        +jdk.VirtualThreadPinned#enabled=true +jdk.VirtualThreadPinned#threshold=20ms \
        +jdk.CPULoad#enabled=true +jdk.CPULoad#period=1s filename="$out/pinned.jfr" >"$out/jfr-start.txt" 2>&1 \
        || log "JFR.start failed: $(cat "$out/jfr-start.txt")"
fi

cp "$out/stats-live.json" "$out/stats-start.json" 2>/dev/null
run_qscope() {  # name duration args...
    local name=$1 dur=$2; shift 2
    if [ "$QSCOPE" = none ]; then sleep "$dur"; return; fi
    timeout $((dur + 60)) "$QSCOPE" snapshot --pid "$app" --duration "$dur" "$@" >"$out/$name" 2>"$out/$name.err"
    echo $? >"$out/$name.rc"
}

if [ "$profile" = partner ]; then
    run_qscope qscope.json "$WINDOW" --json &
    qs=$!
    sleep 2
    log "wrk: $CLIENTS clients on $path with ${quote_pct}% /quote, think ${THINK_MS} ms, ${wrk_secs}s"
    wrk -t2 -c"$CLIENTS" -d"${wrk_secs}s" --timeout 30s -s "$here/load/load.lua" \
        "http://127.0.0.1:$APP_PORT$path" -- "$path" "$THINK_MS" "$quote_pct" >"$out/wrk.out" 2>&1 &
    wrkp=$!
    pids+=("$wrkp")
    sampler $((WINDOW - 2)) >"$out/samples.tsv" &
    smp=$!
    prober /ping $((WINDOW - 3)) >"$out/probes.txt" &
    prb=$!
    sleep $((WINDOW / 2)); jstack_summary
    wait "$qs"
    cp "$out/stats-live.json" "$out/stats-end.json"
    # a second operator attaching mid-spike: the stuck calls must still be there, older
    run_qscope qscope2.json 3 --json
    cp "$out/stats-live.json" "$out/stats-end2.json"
else
    log "wrk: $CLIENTS clients on $path, think ${THINK_MS} ms, ${wrk_secs}s; qscope attaches after ${RAMP}s"
    wrk -t2 -c"$CLIENTS" -d"${wrk_secs}s" --timeout 30s -s "$here/load/load.lua" \
        "http://127.0.0.1:$APP_PORT$path" -- "$path" "$THINK_MS" "$quote_pct" >"$out/wrk.out" 2>&1 &
    wrkp=$!
    pids+=("$wrkp")
    sleep "$RAMP"
    cp "$out/stats-live.json" "$out/stats-start.json"
    run_qscope qscope.json "$WINDOW" --json &
    qs=$!
    sampler "$WINDOW" >"$out/samples.tsv" &
    smp=$!
    prober /db "$WINDOW" >"$out/probes.txt" &
    prb=$!
    sleep $((WINDOW / 2)); jstack_summary
    wait "$qs"
    cp "$out/stats-live.json" "$out/stats-end.json"
fi
wait "$smp" "$prb" 2>/dev/null

if [ "$QSCOPE" != none ] && [ "${QS_REPORT:-0}" = 1 ]; then
    run_qscope qscope.txt 5
fi
if [ "$QSCOPE" != none ] && [ "${QS_TUI:-0}" = 1 ]; then
    tmux_sock="$out/.tmux"
    tmux -S "$tmux_sock" new-session -d -x 132 -y 50 "$QSCOPE top --pid $app; sleep 30"
    sleep 5
    tmux -S "$tmux_sock" capture-pane -p -t 0 >"$out/top.txt" 2>/dev/null
    tmux -S "$tmux_sock" kill-server 2>/dev/null
    tmux_sock=""
fi

if [ "$profile" = virtual ]; then
    "$JAVA_HOME/bin/jcmd" "$app" JFR.stop name=qspin >"$out/jfr-stop.txt" 2>&1
    "$JAVA_HOME/bin/jfr" summary "$out/pinned.jfr" >"$out/jfr-summary.txt" 2>&1
    "$JAVA_HOME/bin/jfr" print --events jdk.VirtualThreadPinned "$out/pinned.jfr" >"$out/jfr.txt" 2>&1
fi

wait "$wrkp"
grep '^WRK_JSON ' "$out/wrk.out" | sed 's/^WRK_JSON //' >"$out/wrk.json"
cp "$out/stats-live.json" "$out/stats-final.json" 2>/dev/null
log "done: $(cat "$out/wrk.json" 2>/dev/null)"
exit 0
