#!/bin/bash
# One scenario of issue 7, end to end: PostgreSQL, the Tomcat app in a profile, a spike of
# clients (wrk), qscope attached mid-spike, and the oracles nobody here wrote sampled during
# the same window. Everything lands in OUTDIR for the integration test and the docs.
#
# usage: scenario.sh PROFILE OUTDIR
#   PROFILE  platform | virtual | gated   (/db load)   or   partner   (silent partner, /quote)
#            or   ceiling   (virtual threads behind maxConnections 100, acceptCount 50; /ping)
#            or   retry     (platform threads, /retry: 3 x 3 x 3 attempts on an nginx partner
#                            answering 503 on PARTNER_PORT; 8 clients without a pause)
#            or   fleet     (two platform instances on APP_PORT and APP_PORT+1 without PostgreSQL,
#                            /partner-call behind a Semaphore(3) each, one qs_downstream partner
#                            answering after 200 ms; one `qscope export` with a target per
#                            instance, a real Prometheus with dashboards/alerts.yml and a budget
#                            of 4 for the partner; 20 clients each without a pause)
#
# Environment (defaults in brackets):
#   QSCOPE        qscope binary; "none" runs load and oracles only       [REPO/build/qscope]
#   QS_DOWNSTREAM qs_downstream binary for the silent partner            [dir of QSCOPE/targets]
#   PG_DIR        a cluster started by pg.sh (kept running); else one is started in OUTDIR/pg
#                 and stopped at the end
#   CLIENTS       concurrent wrk connections            [1000; partner, ceiling: 400; retry: 8]
#   THINK_MS      pause before each request per client  [1000; retry: 0]
#   RAMP          seconds of load before qscope attaches [4]
#   WINDOW        qscope snapshot --duration            [8]
#   APP_BUILD     where the app's classes go (shared between runs)   [OUTDIR/app-build]
#   QS_REPORT=1   then a text report snapshot (a second window, same spike)
#   QS_TUI=1      then a `qscope top` screen after WINDOW seconds (tmux capture-pane)
#   APP_PORT [23080]  PG_PORT [23432]  PARTNER_PORT [23090]  POOL_TIMEOUT_MS [3000]
#   fleet: APP_PORT [23190] (and APP_PORT+1), PARTNER_PORT [23192], EXPORT_PORT [23193],
#          PROM_PORT [23194], PARTNER_LIMIT [3], PARTNER_DELAY_MS [200], BUDGET [4],
#          SAMPLE_SECS [10]
#
# Outputs in OUTDIR: qscope.json (+ .err, qscope.txt, top.txt), wrk.out + wrk.json (the
# load tool's own counts), stats-start.json / stats-end.json / stats.jsonl (the app's own
# counters), samples.tsv (pg_stat_activity, ss, /proc per 0.5 s), pg_samples.tsv
# (pg_stat_activity per 0.1 s), jstack.txt (+ vthreads.json),
# jfr.txt (virtual), probes.txt (curl: status and latency per request), app.log, env.txt.
# fleet writes its own set (see the fleet section below): fleet_samples.tsv, alerts.json,
# prom-*.json, stats-app{1,2}*.json, partner-counters*.json, wrk-app{1,2}.{out,json},
# metrics.txt, qscope.txt, env.txt.
set -uo pipefail

profile=${1:-}; out=${2:-}
case "$profile" in platform|virtual|gated|partner|ceiling|retry|fleet) ;; *)
    echo "usage: scenario.sh platform|virtual|gated|partner|ceiling|retry|fleet OUTDIR" >&2; exit 2 ;;
esac
[ -n "$out" ] || { echo "scenario.sh: OUTDIR missing" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
QSCOPE=${QSCOPE:-$repo/build/qscope}
QS_DOWNSTREAM=${QS_DOWNSTREAM:-$(dirname "$QSCOPE")/targets/qs_downstream}
if [ "$profile" = fleet ]; then
    APP_PORT=${APP_PORT:-23190}
    PARTNER_PORT=${PARTNER_PORT:-23192}
else
    APP_PORT=${APP_PORT:-23080}
    PARTNER_PORT=${PARTNER_PORT:-23090}
fi
PG_PORT=${PG_PORT:-23432}
POOL_TIMEOUT_MS=${POOL_TIMEOUT_MS:-3000}
RAMP=${RAMP:-4}
WINDOW=${WINDOW:-8}
case "$profile" in partner|ceiling) CLIENTS=${CLIENTS:-400} ;; retry) CLIENTS=${CLIENTS:-8} ;; fleet) CLIENTS=${CLIENTS:-20} ;; *) CLIENTS=${CLIENTS:-1000} ;; esac
# retry: clients without a pause, so the partner is called as fast as failures come back
# fleet: the same, so each instance's permits are never idle
case "$profile" in retry|fleet) THINK_MS=${THINK_MS:-0} ;; *) THINK_MS=${THINK_MS:-1000} ;; esac

log() { echo "[scenario $profile $(date +%T)] $*" >&2; }
die() { echo "scenario.sh: $*" >&2; exit 1; }

command -v wrk >/dev/null || die "wrk not found (apt-get install wrk)"
if [ "$QSCOPE" != none ] && [ ! -x "$QSCOPE" ]; then die "no qscope binary at $QSCOPE (set QSCOPE=)"; fi
# Each client holds a socket in wrk and in the JVM.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
# The story is about queues, not about a CPU shared with unrelated work: on a busy machine
# (a developer box running builds) the app, wrk, PostgreSQL and qscope run at a higher
# priority so that a 50 ms query still takes about 50 ms. On a quiet machine (CI) this
# changes nothing. SCENARIO_NICE=0 turns it off.
SCENARIO_NICE=${SCENARIO_NICE:--5}
renice -n "$SCENARIO_NICE" -p $$ >/dev/null 2>&1 || true

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

# ---- fleet: per-instance limits add up across replicas (issue 20) ------------------------
# Two instances of the app (no PostgreSQL), each allowed PARTNER_LIMIT concurrent calls to
# one line-based partner (qs_downstream, answering after PARTNER_DELAY_MS), each under more
# load than its limit serves; one `qscope export` with a target per instance; a real
# Prometheus scraping it every second with dashboards/alerts.yml (`for:` shortened, below)
# and a budget for the partner. Oracles: the partner's own count of requests in progress
# (its --counters-file), the instances' own counters (stats JSON), and Prometheus's answers.
#
# Outputs: env.txt; fleet_samples.tsv (one line per 0.5 s over SAMPLE_SECS: t, partner
# in progress, Prometheus's qscope:downstream_busy:sum_by_peer, qscope_downstream_busy of
# app1 and app2, then each app's own partner calls in progress and waiting for a permit);
# partner-counters{-start,-end}.json; stats-app{1,2}{-start,-end}.json (+ stats-app{1,2}.jsonl);
# prom-sum.json, prom-busy.json, prom-budget.json (the last instant queries); alerts.json
# (/api/v1/alerts once QscopeFleetPeerOverBudget fires, or after ALERT_SECS); alert.txt
# (state and seconds from the load's start); metrics.txt (the exporter's /metrics);
# qscope.txt (+ .err, .rc: a text snapshot of app1); wrk-app{1,2}.out/.json; alerts.yml
# (the copy with `for:` shortened), budget.yml, prometheus.yml, prometheus.log; app{1,2}.log,
# partner.log, export.log.
if [ "$profile" = fleet ]; then
    APP_PORT2=$((APP_PORT + 1))
    EXPORT_PORT=${EXPORT_PORT:-23193}
    PROM_PORT=${PROM_PORT:-23194}
    PARTNER_LIMIT=${PARTNER_LIMIT:-3}
    PARTNER_DELAY_MS=${PARTNER_DELAY_MS:-200}
    BUDGET=${BUDGET:-4}
    SAMPLE_SECS=${SAMPLE_SECS:-10}
    ALERT_SECS=${ALERT_SECS:-25}
    ALERT_FOR=3s
    peer="127.0.0.1:$PARTNER_PORT"
    [ -x "$QS_DOWNSTREAM" ] || die "no qs_downstream at $QS_DOWNSTREAM (set QS_DOWNSTREAM=)"
    [ "$QSCOPE" != none ] || die "fleet needs qscope (its numbers come from qscope export)"
    prom=$(command -v prometheus) || die "prometheus not found (apt-get install prometheus)"
    command -v jq >/dev/null || die "jq not found (apt-get install jq)"

    envfile=$("$here/tomcat/build.sh" "${APP_BUILD:-$out/app-build}") || die "app build failed"
    # shellcheck disable=SC1090
    . "$envfile"
    rm -rf "$out"/*.json "$out"/*.txt "$out"/*.tsv "$out"/*.jsonl "$out"/*.out "$out/prometheus" 2>/dev/null

    "$QS_DOWNSTREAM" --port "$PARTNER_PORT" --addr 127.0.0.1 --delay-ms "$PARTNER_DELAY_MS" \
        --counters-file "$out/partner-counters.json" >"$out/partner.log" 2>&1 &
    pids+=($!)

    app_pids=()
    for i in 1 2; do
        port=$((APP_PORT + i - 1))
        "$JAVA_HOME/bin/java" -Xms256m -Xmx256m -Dqs.profile=platform -Dqs.port="$port" -Dqs.pg=none \
            -Dqs.partner="$peer" -Dqs.partnerLimit="$PARTNER_LIMIT" \
            -Dqs.stats="$out/stats-app$i-live.json" -Dqs.baseDir="$out/tomcat-base-$i" \
            -cp "$CLASSPATH" qscope.scenario.ScenarioApp >"$out/app$i.log" 2>&1 &
        app_pids+=($!)
        pids+=($!)
    done
    app=${app_pids[0]}
    echo "${app_pids[0]} ${app_pids[1]}" >"$out/app.pid"
    for i in 1 2; do
        port=$((APP_PORT + i - 1))
        for _ in $(seq 150); do
            curl -sf -m 1 -o /dev/null "http://127.0.0.1:$port/ping" && break
            kill -0 "${app_pids[$((i - 1))]}" 2>/dev/null || { cat "$out/app$i.log" >&2; die "app$i exited"; }
            sleep 0.2
        done
        curl -sf -m 2 -o /dev/null "http://127.0.0.1:$port/ping" || { tail "$out/app$i.log" >&2; die "app$i does not answer /ping"; }
        # warm the JIT and prove the partner answers through the app
        for _ in 1 2 3 4 5; do
            curl -sf -m 5 -o /dev/null "http://127.0.0.1:$port/partner-call" || die "app$i: /partner-call fails before the load"
        done
    done

    # The rules: alerts.yml as shipped, but with every `for:` shortened to $ALERT_FOR (as
    # tests/integration/fleet_test.cpp does) so the alert can fire within the run; and the
    # scenario's budget for the partner.
    sed -E "s/^( +)for: [^ ]+$/\\1for: $ALERT_FOR/" "$repo/dashboards/alerts.yml" >"$out/alerts.yml"
    cat >"$out/budget.yml" <<YML
groups:
  - name: scenario-budgets
    rules:
      - record: qscope_peer_budget
        expr: vector($BUDGET)
        labels: {peer: "$peer"}
YML
    cat >"$out/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 900ms
  evaluation_interval: 1s
rule_files: ['$out/alerts.yml', '$out/budget.yml']
scrape_configs:
  - job_name: qscope
    static_configs:
      - targets: ['127.0.0.1:$EXPORT_PORT']
YML

    "$QSCOPE" export --target app1=port:"$APP_PORT" --target app2=port:"$APP_PORT2" \
        --listen 127.0.0.1:"$EXPORT_PORT" >"$out/export.log" 2>&1 &
    exporter=$!
    pids+=("$exporter")
    up=0
    for _ in $(seq 150); do
        m=$(curl -s -m 2 "http://127.0.0.1:$EXPORT_PORT/metrics")
        if grep -q 'qscope_up{service="app1"} 1' <<<"$m" && grep -q 'qscope_up{service="app2"} 1' <<<"$m"; then up=1; break; fi
        kill -0 "$exporter" 2>/dev/null || { cat "$out/export.log" >&2; die "qscope export exited"; }
        sleep 0.2
    done
    [ "$up" = 1 ] || { tail "$out/export.log" >&2; die "qscope export does not report both targets up"; }

    "$prom" --config.file="$out/prometheus.yml" --storage.tsdb.path="$out/prometheus" \
        --web.listen-address=127.0.0.1:"$PROM_PORT" --log.level=warn >"$out/prometheus.log" 2>&1 &
    pids+=($!)
    promq() {  # EXPR → the instant query's JSON answer
        curl -s -m 5 -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$1"
    }
    for _ in $(seq 100); do
        curl -sf -m 1 -o /dev/null "http://127.0.0.1:$PROM_PORT/-/ready" && break
        sleep 0.2
    done
    curl -sf -m 2 -o /dev/null "http://127.0.0.1:$PROM_PORT/-/ready" || { tail "$out/prometheus.log" >&2; die "prometheus is not ready"; }
    [ "$(promq 'count(rate(prometheus_rule_evaluation_failures_total[1m]))' | jq -r '.status')" = success ] ||
        die "prometheus does not answer queries"

    wrk_secs=$((RAMP + SAMPLE_SECS + ALERT_SECS + 15))
    {
        echo "profile=fleet app_profile=platform instances=2 clients_per_instance=$CLIENTS think_ms=$THINK_MS ramp=$RAMP sample_secs=$SAMPLE_SECS wrk_secs=$wrk_secs"
        echo "partner_limit=$PARTNER_LIMIT partner_delay_ms=$PARTNER_DELAY_MS budget=$BUDGET alert_for=$ALERT_FOR peer=$peer"
        echo "app_port=$APP_PORT app_port2=$APP_PORT2 partner_port=$PARTNER_PORT export_port=$EXPORT_PORT prom_port=$PROM_PORT"
        echo "java=$JAVA_HOME app_pid=${app_pids[0]} app2_pid=${app_pids[1]} prometheus=$($prom --version 2>&1 | head -1)"
    } >"$out/env.txt"

    for i in 1 2; do
        ( while :; do cat "$out/stats-app$i-live.json" 2>/dev/null; sleep 0.25; done ) >"$out/stats-app$i.jsonl" &
        pids+=($!)
    done
    log "wrk: $CLIENTS clients on each of :$APP_PORT and :$APP_PORT2 /partner-call, think ${THINK_MS} ms, ${wrk_secs}s"
    T0_MS=$(date +%s%3N)
    wrkps=()
    for i in 1 2; do
        wrk -t2 -c"$CLIENTS" -d"${wrk_secs}s" --timeout 30s -s "$here/load/load.lua" \
            "http://127.0.0.1:$((APP_PORT + i - 1))/partner-call" -- /partner-call "$THINK_MS" 0 >"$out/wrk-app$i.out" 2>&1 &
        wrkps+=($!)
        pids+=($!)
    done
    sleep "$RAMP"
    cp "$out/partner-counters.json" "$out/partner-counters-start.json"
    for i in 1 2; do cp "$out/stats-app$i-live.json" "$out/stats-app$i-start.json"; done

    # fleet_samples.tsv: the oracles and Prometheus's answers, sampled together every 0.5 s
    sum_expr="qscope:downstream_busy:sum_by_peer{peer=\"$peer\"}"
    busy_expr="qscope_downstream_busy{peer=\"$peer\"}"
    printf 't\tpartner_in_progress\tprom_sum\tprom_busy_app1\tprom_busy_app2\tapp1_in_progress\tapp1_waiting\tapp2_in_progress\tapp2_waiting\n' >"$out/fleet_samples.tsv"
    # the window starts once Prometheus has the sum (a scrape and a rule evaluation after the
    # exporter's first refresh under load)
    for _ in $(seq 30); do
        [ "$(promq "$sum_expr" | jq -r '.data.result | length' 2>/dev/null)" -gt 0 ] 2>/dev/null && break
        sleep 0.5
    done
    s0=$(date +%s%3N); k=0
    while [ $((k * 500)) -lt $((SAMPLE_SECS * 1000)) ]; do
        now=$(date +%s%3N)
        ds=$(jq -r '.in_progress' "$out/partner-counters.json" 2>/dev/null)
        promq "$sum_expr" >"$out/prom-sum.json"
        promq "$busy_expr" >"$out/prom-busy.json"
        a1=$(jq -r '"\(.partner.in_progress)\t\(.partner.waiting)"' "$out/stats-app1-live.json" 2>/dev/null)
        a2=$(jq -r '"\(.partner.in_progress)\t\(.partner.waiting)"' "$out/stats-app2-live.json" 2>/dev/null)
        [ -n "$a1" ] || a1=$'-\t-'
        [ -n "$a2" ] || a2=$'-\t-'
        sum=$(jq -r '.data.result[0].value[1] // "-"' "$out/prom-sum.json" 2>/dev/null)
        b1=$(jq -r '[.data.result[] | select(.metric.service == "app1") | .value[1]][0] // "-"' "$out/prom-busy.json" 2>/dev/null)
        b2=$(jq -r '[.data.result[] | select(.metric.service == "app2") | .value[1]][0] // "-"' "$out/prom-busy.json" 2>/dev/null)
        printf '%d.%03d\t%s\t%s\t%s\t%s\t%s\t%s\n' $(((now - T0_MS) / 1000)) $(((now - T0_MS) % 1000)) \
            "${ds:--}" "${sum:--}" "${b1:--}" "${b2:--}" "$a1" "$a2" >>"$out/fleet_samples.tsv"
        k=$((k + 1))
        rest=$((s0 + k * 500 - $(date +%s%3N)))
        [ "$rest" -gt 0 ] && sleep "$(printf '0.%03d' "$rest")"
    done
    cp "$out/partner-counters.json" "$out/partner-counters-end.json"
    for i in 1 2; do cp "$out/stats-app$i-live.json" "$out/stats-app$i-end.json"; done
    promq "qscope_peer_budget{peer=\"$peer\"}" >"$out/prom-budget.json"
    curl -s -m 5 "http://127.0.0.1:$EXPORT_PORT/metrics" >"$out/metrics.txt"

    # A text report of one instance, for the docs, while the load goes on (a second qscope
    # beside the exporter, as an operator would run one).
    timeout 70 "$QSCOPE" snapshot --pid "${app_pids[0]}" --duration 5 >"$out/qscope.txt" 2>"$out/qscope.txt.err" &
    snap=$!
    pids+=("$snap")

    # The alert: QscopeFleetPeerOverBudget for the partner, firing (or the last state seen).
    state=none; end=$(($(date +%s%3N) + ALERT_SECS * 1000))
    while [ "$(date +%s%3N)" -lt "$end" ]; do
        curl -s -m 5 "http://127.0.0.1:$PROM_PORT/api/v1/alerts" >"$out/alerts.json"
        state=$(jq -r --arg p "$peer" '[.data.alerts[] | select(.labels.alertname == "QscopeFleetPeerOverBudget" and .labels.peer == $p) | .state][0] // "none"' "$out/alerts.json" 2>/dev/null)
        [ "$state" = firing ] && break
        sleep 0.5
    done
    now=$(date +%s%3N)
    {
        echo "state $state"
        echo "seconds_since_load_start $(((now - T0_MS) / 1000)).$(printf %03d $(((now - T0_MS) % 1000)))"
    } >"$out/alert.txt"
    log "QscopeFleetPeerOverBudget: $state"

    wait "$snap"; echo $? >"$out/qscope.txt.rc"
    for i in 1 2; do
        wait "${wrkps[$((i - 1))]}"
        grep '^WRK_JSON ' "$out/wrk-app$i.out" | sed 's/^WRK_JSON //' >"$out/wrk-app$i.json"
        cp "$out/stats-app$i-live.json" "$out/stats-app$i-final.json" 2>/dev/null
    done
    log "done: app1 $(cat "$out/wrk-app1.json" 2>/dev/null) app2 $(cat "$out/wrk-app2.json" 2>/dev/null)"
    exit 0
fi

# ---- PostgreSQL --------------------------------------------------------------------------
if [ -z "${PG_DIR:-}" ]; then
    own_pg="$out/pg"
    chmod o+x "$out"   # the server runs as postgres
    PG_DIR=$own_pg
fi
"$here/pg.sh" start "$PG_DIR" "$PG_PORT" || die "PostgreSQL did not start"
pgq() { "$here/pg.sh" psql "$PG_DIR" "$PG_PORT" -c "$1" 2>/dev/null; }
# backends fork from the postmaster and inherit its priority
pm=$(head -1 "$PG_DIR/data/postmaster.pid" 2>/dev/null)
[ -n "$pm" ] && renice -n "$SCENARIO_NICE" -p "$pm" >/dev/null 2>&1

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

if [ "$profile" = retry ]; then
    # The failing partner: nginx answering 503 on /fail, keeping connections for as many
    # requests as the app sends; its access log ("$msec $status") counts the calls it got.
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$nginx" ] || die "nginx not found (apt-get install nginx)"
    mkdir -p "$out/partner/logs" "$out/partner/tmp"
    cat >"$out/partner/nginx.conf" <<NGINX
user root;
worker_processes 1;
daemon off;
pid $out/partner/nginx.pid;
error_log $out/partner/logs/error.log warn;
events { worker_connections 1024; }
http {
  log_format oracle '\$msec \$status';
  access_log $out/partner/logs/access.log oracle;
  keepalive_timeout 120s;
  keepalive_requests 10000000;
  client_body_temp_path $out/partner/tmp/body;
  proxy_temp_path $out/partner/tmp/proxy;
  fastcgi_temp_path $out/partner/tmp/fastcgi;
  uwsgi_temp_path $out/partner/tmp/uwsgi;
  scgi_temp_path $out/partner/tmp/scgi;
  server {
    listen 127.0.0.1:$PARTNER_PORT;
    location /fail { return 503; }
  }
}
NGINX
    "$nginx" -c "$out/partner/nginx.conf" -p "$out/partner" >"$out/partner.log" 2>&1 &
    pids+=($!)
fi

app_profile=$profile
case "$profile" in partner|retry) app_profile=platform ;; esac
"$JAVA_HOME/bin/java" -Xms1g -Xmx1g -Dqs.profile="$app_profile" -Dqs.port="$APP_PORT" \
    -Dqs.pg=127.0.0.1:"$PG_PORT" -Dqs.partner=127.0.0.1:"$PARTNER_PORT" -Dqs.retryPartner=127.0.0.1:"$PARTNER_PORT" \
    -Dqs.poolTimeoutMs="$POOL_TIMEOUT_MS" \
    -Dqs.stats="$out/stats-live.json" -Dqs.baseDir="$out/tomcat-base" -Xlog:gc:file="$out/gc.log" \
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
if [ "$profile" = retry ]; then
    # Warm the JIT and prove the partner fails as it should: every attempt, 503.
    for _ in 1 2 3 4 5; do
        [ "$(curl -s -m 10 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$APP_PORT/retry")" = 503 ] ||
            die "/retry does not answer 503 before the load (is nginx answering on :$PARTNER_PORT?)"
    done
elif [ "$profile" != partner ]; then
    # Warm the JIT and prove the pool works before the spike.
    for _ in 1 2 3 4 5; do curl -sf -m 5 -o /dev/null "http://127.0.0.1:$APP_PORT/db" || die "/db fails before the spike"; done
fi
{
    echo "profile=$profile app_profile=$app_profile clients=$CLIENTS think_ms=$THINK_MS ramp=$RAMP window=$WINDOW"
    echo "pool=10 pool_timeout_ms=$POOL_TIMEOUT_MS gate=10 max_threads=200 app_port=$APP_PORT pg_port=$PG_PORT partner_port=$PARTNER_PORT"
    echo "java=$JAVA_HOME app_pid=$app"
    [ "$profile" = ceiling ] && echo "max_connections=100 accept_count=50"
    [ "$profile" = retry ] && echo "retry_attempts=3"
} >"$out/env.txt"

# ---- oracles -----------------------------------------------------------------------------
# samples.tsv: one line per 0.5 s:
#   t  pg_active pg_conns  app_conns_with_unread accept_queue  pg_estab partner_estab
#   http_threads http_futex  (comm http-nio*, and those in futex per /proc/TID/syscall)
#   app_estab  (established server-side connections of the app's port, accepted or queued)
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
        estab=$(ss -Htn state established "( sport = :$APP_PORT )" | wc -l)
        printf '%d.%03d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $(((now - t0) / 1000)) $(((now - t0) % 1000)) "$pg" "$ssapp" "${lq:-0}" "$pge" "$pe" "$th" "$estab"
        sleep 0.5
    done
}

# stats.jsonl: the app's counters every 0.25 s until killed
stats_sampler() {
    while :; do
        cat "$out/stats-live.json" 2>/dev/null
        sleep 0.25
    done
}

# pg_samples.tsv: pg_stat_activity every 0.1 s from one psql session (a new psql per sample
# costs more than the query): epoch, active backends of the app's pool, all its backends.
pg_sampler() {
    local n=$(($1 * 10)) i
    for ((i = 0; i < n; i++)); do
        echo "select extract(epoch from clock_timestamp()), count(*) filter (where state = 'active'), count(*) from pg_stat_activity where application_name = 'qscope-scenario';"
        echo "select pg_sleep(0.1);"
    done | "$here/pg.sh" psql "$PG_DIR" "$PG_PORT" -F $'\t' 2>/dev/null | grep -v '^$'
}

# A few sequential clients measuring status and latency of single requests: the per-status
# latency wrk does not give. probes.txt: HTTP status (000: no answer within the limit),
# seconds in all, seconds of them connecting (SYN retransmits after an accept-queue
# overflow land here; wrk's latency leaves connecting out), seconds since T0_MS.
prober() {  # path seconds limit
    local path=$1 limit=$3 end r now
    end=$(($(date +%s%3N) + $2 * 1000))
    while [ "$(date +%s%3N)" -lt "$end" ]; do
        r=$(curl -s -o /dev/null -m "$limit" -w '%{http_code} %{time_total} %{time_connect}' "http://127.0.0.1:$APP_PORT$path")
        now=$(date +%s%3N)
        echo "$r $(((now - T0_MS) / 1000)).$(printf %03d $(((now - T0_MS) % 1000)))"
        sleep 0.3
    done
}

jstack_summary() {
    "$JAVA_HOME/bin/jcmd" "$app" Thread.print >"$out/jstack.txt" 2>&1
    if [ "$app_profile" != platform ]; then
        "$JAVA_HOME/bin/jcmd" "$app" Thread.dump_to_file -format=json -overwrite "$out/vthreads.json" >/dev/null 2>&1
    fi
}

run_qscope() {  # name duration args...
    local name=$1 dur=$2; shift 2
    if [ "$QSCOPE" = none ]; then sleep "$dur"; return; fi
    timeout $((dur + 60)) "$QSCOPE" snapshot --pid "$app" --duration "$dur" "$@" >"$out/$name" 2>"$out/$name.err"
    echo $? >"$out/$name.rc"
}

# TcpExt ListenOverflows (/proc/net/netstat): SYNs dropped because an accept queue was full.
listen_overflows() {
    awk '/^TcpExt:/ { if (!h) { for (i = 1; i <= NF; i++) n[i] = $i; h = 1 }
                      else for (i = 1; i <= NF; i++) if (n[i] == "ListenOverflows") print $i }' /proc/net/netstat
}

# The JSON snapshot (what the test asserts on).
start_observers() {
    { echo "listen_overflows $(listen_overflows)"; echo "epoch_ms $(date +%s%3N)"; } >"$out/start.txt"
    run_qscope qscope.json "$WINDOW" --json &
    qs=$!
}
finish_observers() {
    wait "$qs"
    # end.txt: oracles at the window's end
    {
        echo "partner_estab $(ss -Htn state established "( dport = :$PARTNER_PORT )" | wc -l)"
        echo "pg_estab $(ss -Htn state established "( dport = :$PG_PORT )" | wc -l)"
        echo "app_unread $(ss -Htn state established "( sport = :$APP_PORT )" | awk '$1 > 0' | wc -l)"
        echo "listen_overflows $(listen_overflows)"
        echo "epoch_ms $(date +%s%3N)"
    } >"$out/end.txt"
}
# For the docs, after the JSON window and still in the spike: a text report and a `qscope
# top` screen, one after the other (one qscope at a time, as an operator would run them).
extra_views() {
    [ "$QSCOPE" = none ] && return
    if [ "${QS_REPORT:-0}" = 1 ]; then
        run_qscope qscope.txt "$WINDOW"
    fi
    if [ "${QS_TUI:-0}" = 1 ]; then
        tmux_sock="$out/.tmux"
        tmux -S "$tmux_sock" new-session -d -x 150 -y 60 "$QSCOPE top --pid $app --no-color 2>$out/top.err; sleep 600"
        sleep "$WINDOW"
        tmux -S "$tmux_sock" capture-pane -p -t 0 >"$out/top.txt" 2>/dev/null
        tmux -S "$tmux_sock" kill-server 2>/dev/null
        tmux_sock=""
    fi
}
extra=0
[ "${QS_REPORT:-0}" = 1 ] && extra=$((extra + WINDOW + 8))
[ "${QS_TUI:-0}" = 1 ] && extra=$((extra + WINDOW + 2))

# ---- the spike ---------------------------------------------------------------------------
if [ "$profile" = partner ]; then
    path=/ping; quote_pct=20
    wrk_secs=$((WINDOW + 10 + extra))
elif [ "$profile" = ceiling ]; then
    path=/ping; quote_pct=0
    wrk_secs=$((RAMP + WINDOW + 8 + extra))
elif [ "$profile" = retry ]; then
    path=/retry; quote_pct=0
    wrk_secs=$((RAMP + WINDOW + 8 + extra))
else
    path=/db; quote_pct=0
    # qscope needs a few seconds to load its probes before its window starts
    wrk_secs=$((RAMP + WINDOW + 8 + extra))
fi

if [ "$profile" = virtual ]; then
    # jdk.CPULoad proves the recording ran; the count that matters is VirtualThreadPinned.
    "$JAVA_HOME/bin/jcmd" "$app" JFR.start name=qspin settings=none \
        +jdk.VirtualThreadPinned#enabled=true +jdk.VirtualThreadPinned#threshold=20ms \
        +jdk.CPULoad#enabled=true +jdk.CPULoad#period=1s filename="$out/pinned.jfr" >"$out/jfr-start.txt" 2>&1 \
        || log "JFR.start failed: $(cat "$out/jfr-start.txt")"
fi

stats_sampler >"$out/stats.jsonl" &
pids+=($!)

start_wrk() {
    wrk -t2 -c"$CLIENTS" -d"${wrk_secs}s" --timeout 30s -s "$here/load/load.lua" \
        "http://127.0.0.1:$APP_PORT$path" -- "$path" "$THINK_MS" "$quote_pct" >"$out/wrk.out" 2>&1 &
    wrkp=$!
    pids+=("$wrkp")
}

if [ "$profile" = partner ]; then
    # attached before the spike: qscope sees every partner call from its first byte
    cp "$out/stats-live.json" "$out/stats-start.json"
    start_observers
    sleep 2
    log "wrk: $CLIENTS clients on $path with ${quote_pct}% /quote, think ${THINK_MS} ms, ${wrk_secs}s"
    T0_MS=$(date +%s%3N)
    start_wrk
    sampler $((WINDOW - 2)) >"$out/samples.tsv" &
    smp=$!
    pg_sampler $((WINDOW - 2)) >"$out/pg_samples.tsv" &
    pgs=$!
    prober /ping $((WINDOW - 2)) 2 >"$out/probes.txt" &
    prb=$!
    sleep $((WINDOW / 2)); jstack_summary
    finish_observers
    cp "$out/stats-live.json" "$out/stats-end.json"
    wait "$prb"
    prober /ping 1 2 >>"$out/probes.txt"   # the health check, after the window
    # a second operator attaching mid-spike: the stuck calls must still be there, older
    run_qscope qscope2.json 3 --json
    cp "$out/stats-live.json" "$out/stats-end2.json"
    echo "partner_estab $(ss -Htn state established "( dport = :$PARTNER_PORT )" | wc -l)" >"$out/end2.txt"
    extra_views
else
    log "wrk: $CLIENTS clients on $path, think ${THINK_MS} ms, ${wrk_secs}s; qscope attaches after ${RAMP}s"
    T0_MS=$(date +%s%3N)
    start_wrk
    sleep "$RAMP"
    cp "$out/stats-live.json" "$out/stats-start.json"
    start_observers
    sampler "$WINDOW" >"$out/samples.tsv" &
    smp=$!
    pg_sampler "$WINDOW" >"$out/pg_samples.tsv" &
    pgs=$!
    # ten probers: a probe that waits out the 3 s pool timeout takes a third of the window, and
    # the virtual profile must catch a few of its 503s (a quarter of its answers) to time them;
    # six caught none in one CI run
    prb=""
    probe_path=/db; [ "$profile" = ceiling ] && probe_path=/ping; [ "$profile" = retry ] && probe_path=/retry
    for i in $(seq 10); do prober "$probe_path" "$WINDOW" 20 >"$out/probes.$i.txt" & prb="$prb $!"; done
    sleep $((WINDOW / 2)); jstack_summary
    finish_observers
    cp "$out/stats-live.json" "$out/stats-end.json"
    extra_views
fi
# shellcheck disable=SC2086
wait "$smp" $prb "$pgs" 2>/dev/null
[ "$profile" = partner ] || cat "$out"/probes.[0-9]*.txt >"$out/probes.txt"

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
