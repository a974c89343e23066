#!/usr/bin/env bash
# The one test command (README; .ci/run calls exactly this): install dependencies, build,
# run every test tier. Integration tests need root (BPF); run with sudo.
#   tests/run.sh                 everything
#   tests/run.sh -L unit         one ctest label (unit, integration, extra)
#   tests/run.sh -R requests     ctest name regex
# The suite runs once, on a build instrumented with ASan+UBSan (qscope and its libraries, in
# the qscope binary and in the unit and integration test binaries that drive them in-process;
# not the tests' own sources, the test targets, the BPF objects or the JVM): two full suites
# do not fit CI's budget, and every integration test then doubles as a memory-safety test of
# the code paths it drives. Performance numbers come from bench/ on the release build (build/).
# Env: QSCOPE_BUILD_DIR (default build-test; never build/, which demo.sh and bench/ use
#      unsanitized), QSCOPE_SANITIZE=0 (plain RelWithDebInfo build, no sanitizers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
bash .ci/setup
build=${QSCOPE_BUILD_DIR:-build-test}
sanitize=ON
[[ "${QSCOPE_SANITIZE:-1}" == 0 ]] && sanitize=OFF
start=$SECONDS
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQSCOPE_SANITIZE="$sanitize" >/dev/null
cmake --build "$build" -j"$(nproc)"
echo "run.sh: build ($sanitize sanitizers) took $((SECONDS - start)) s"
build=$(cd "$build" && pwd)
# In CI a skipped test is a failure: the harness reads QSCOPE_FAIL_ON_SKIP.
if [[ "${CI:-}" == "true" ]]; then export QSCOPE_FAIL_ON_SKIP=1; fi
reports=
if [[ $sanitize == ON ]]; then
  # Every sanitized process (qscope, test targets, test binaries) writes its report to a
  # file, not only to a stderr a test may not print: a leak in a target the test kills
  # with SIGTERM and whose exit status it ignores must fail the run too.
  reports=$build/sanitizer-reports
  rm -rf "$reports" && mkdir -p "$reports"
  # Leaks are errors; UB halts with a stack.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1:log_path=$reports/asan"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan"
  # Leaks in the C library's own one-time state, each named with its reason in the file.
  export LSAN_OPTIONS="suppressions=$root/tests/lsan.supp:print_suppressions=0"
fi
rc=0
# The background lane, in a full run: the fuzzers' build (~200 s of CPU, measuring nothing) at
# idle priority, beside the suite, whose serial tests leave more than half of the cores idle
# (tree_test: 40% busy); a task of theirs that wakes takes its core back at once (SCHED_IDLE).
# extra.fuzz, near the end, then finds its tree built (it builds what is left, under the same
# lock, and fails if the build does). Only this: the kernel matrix's guests, run so, starved
# for minutes and were failed by their own time limits, and slowed the serial tests beside
# them (a fixed-length load in nginx_test outlived; docs/design.md §7).
background_lane() {
  local idle=(chrt --idle 0)
  chrt --idle 0 true 2>/dev/null || idle=(nice -n 19)
  QSCOPE_FUZZ_DIR=$build/extra-fuzz "${idle[@]}" bash "$root/tests/ci-extra.sh" fuzz-build \
    > "$build/fuzz-build.log" 2>&1 || true
}
lane_pid=
if [[ $# -eq 0 ]]; then
  set -m  # the lane in a process group of its own, killed with it if this script is stopped
  background_lane </dev/null &
  lane_pid=$!
  set +m
  trap 'kill -- -"$lane_pid" 2>/dev/null || true' EXIT
fi
# -j: the integration, soak and fuzz tests are RUN_SERIAL (they measure the machine) and run
# alone; the rest (unit tests, the package, the kernel matrix's guests) share the cores.
(cd "$build" && ctest --output-on-failure -j"$(nproc)" "$@") || rc=$?
if [[ -n $lane_pid ]]; then
  wait "$lane_pid" || true
  trap - EXIT
fi
if [[ -n $reports ]] && compgen -G "$reports/*" >/dev/null; then
  # Name the process: the report file is <tool>.<pid>, and the pid is long gone.
  for f in "$reports"/*; do
    echo "==== sanitizer report $f ($(grep -m1 -oE '(ERROR|SUMMARY): [A-Za-z]+Sanitizer: [a-z-]+|runtime error: .*' "$f" || echo '?'))"
    cat "$f"
  done
  echo "run.sh: sanitizer reports above: FAIL" >&2
  rc=1
fi
echo "run.sh: build + tests took $((SECONDS - start)) s"
exit $rc
