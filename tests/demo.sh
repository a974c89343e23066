#!/usr/bin/env bash
# One command for a newcomer: install deps, build, start a small demo service whose
# requests queue at a 4-connection pool to a slow downstream, drive load at it, and open
# `qscope top` on it. Quit with q; everything started here is stopped on exit.
#   sudo tests/demo.sh                 the dashboard
#   sudo tests/demo.sh snapshot        a one-off report instead (10 s)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
mode=${1:-top}
bash .ci/setup
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)" --target qscope qs_server qs_downstream qs_load >/dev/null
T=build/targets
work=$(mktemp -d /tmp/qscope-demo-XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT INT TERM

ready_port() {  # waits for "READY port=N" in a log
  for _ in $(seq 100); do
    if grep -q 'READY port=' "$1" 2>/dev/null; then sed -n 's/.*READY port=\([0-9]*\).*/\1/p' "$1" | head -1; return; fi
    sleep 0.05
  done
  echo "demo: $1 never became ready" >&2; cat "$1" >&2; exit 1
}

# A "database" answering each query after 40 ms.
$T/qs_downstream --port 0 --delay-ms 40 >"$work/db.log" 2>&1 & pids+=($!)
db=$(ready_port "$work/db.log")
# The service: 32 worker threads sharing a pool of 4 connections to that database.
$T/qs_server --port 0 --workers 32 --downstream 127.0.0.1:"$db" --pool 4 >"$work/app.log" 2>&1 & pids+=($!)
app_pid=$!
app=$(ready_port "$work/app.log")
# 200 clients for up to 10 minutes: far more than 4 connections can serve.
$T/qs_load --host 127.0.0.1 --port "$app" --connections 200 --duration 600 >"$work/load.log" 2>&1 & pids+=($!)
echo "demo: service pid $app_pid on 127.0.0.1:$app, pool of 4 to a 40 ms database on :$db, 200 clients"
sleep 1
if [[ $mode == snapshot ]]; then
  build/qscope snapshot --pid "$app_pid" --duration 10
else
  build/qscope top --pid "$app_pid"
fi
