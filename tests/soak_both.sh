#!/usr/bin/env bash
# ctest extra.soak: bench/soak.sh's 2-minute soak in both socket scopes, side by side: the
# global one (port 24990) and the cgroup one (24991, the server in a cgroup of its own). What a
# soak asserts (RSS and map entries flat, completed requests within 2% of the server's own)
# does not depend on having the machine alone, and two exporters on one host is a shape users
# run; side by side they take one soak's time, not two.
# Env: QSCOPE_BUILD_DIR, QSCOPE_BENCH_NO_BUILD (as bench/soak.sh).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
logs=$(mktemp -d /tmp/qscope-soak-both-XXXXXX)
trap 'rm -rf "$logs"' EXIT
bash bench/soak.sh --minutes 2 --port 24990 >"$logs/global" 2>&1 & global=$!
bash bench/soak.sh --minutes 2 --port 24991 --cgroup >"$logs/cgroup" 2>&1 & cgroup=$!
rc=0
wait $global || { echo "soak_both: the global soak FAILED" >&2; rc=1; }
wait $cgroup || { echo "soak_both: the cgroup soak FAILED" >&2; rc=1; }
for mode in global cgroup; do
  echo "==== soak, $mode scope"
  cat "$logs/$mode"
done
exit $rc
