#!/usr/bin/env bash
# ctest unit.alert_rules: dashboards/alerts.yml is valid (`promtool check rules`) and every
# rule fires, and stays quiet, where dashboards/alerts_test.yml says (`promtool test rules`).
# promtool comes with Debian's prometheus package (.ci/setup). Without it the test skips
# with the reason; in CI (QSCOPE_FAIL_ON_SKIP=1, or CI=true) a skip is a failure.
set -euo pipefail
dashboards=$(cd "$(dirname "$0")/../dashboards" && pwd)
if ! command -v promtool > /dev/null; then
  echo "SKIP: promtool not installed (Debian package prometheus): alert rules not checked"
  if [[ "${QSCOPE_FAIL_ON_SKIP:-}" == 1 || "${CI:-}" == true ]]; then
    echo "FAIL: skipped in CI, which counts as a failure" >&2
    exit 1
  fi
  exit 0
fi
promtool --version 2>&1 | head -1
promtool check rules "$dashboards/alerts.yml"
# Test files name their rule files relative to themselves.
cd "$dashboards"
promtool test rules alerts_test.yml
