#!/usr/bin/env bash
# The one test command (README; .ci/run calls exactly this): install dependencies, build,
# run every test tier. Integration tests need root (BPF); run with sudo.
#   tests/run.sh                 everything
#   tests/run.sh -L unit         one ctest label (unit, integration)
#   tests/run.sh -R requests     ctest name regex
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash .ci/setup
build=${QSCOPE_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)"
cd "$build"
# In CI a skipped test is a failure: the harness reads QSCOPE_FAIL_ON_SKIP.
if [[ "${CI:-}" == "true" ]]; then export QSCOPE_FAIL_ON_SKIP=1; fi
ctest --output-on-failure "$@"
