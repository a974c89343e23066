#!/usr/bin/env bash
# ctest extra.package: builds the Debian package from a built tree (`cpack -G DEB`, the
# install rules of the top-level CMakeLists.txt), unpacks it into a scratch root and checks
# what a host would get: the binary runs and reports the package's version, every file is
# where the unit, the man page and docs/grafana.md say, no install-time placeholder is
# left, and systemd accepts the exporter unit (`systemd-analyze verify`, plus a floor on
# `systemd-analyze security`'s exposure score so the hardening cannot quietly erode).
#   tests/package.sh BUILD_DIR
# A missing optional tool skips its step with the reason; in CI (CI=true, or
# QSCOPE_FAIL_ON_SKIP=1 as tests/run.sh sets it) a skip fails, as in the integration harness.
set -euo pipefail
build=$(cd "${1:?usage: tests/package.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/qscope-package-XXXXXX)
trap 'rm -rf "$work"' EXIT
fail=0
check() {  # check DESCRIPTION COMMAND...: runs the command, reports, remembers a failure
  local what=$1
  shift
  if "$@"; then echo "ok: $what"; else echo "FAIL: $what" >&2; fail=1; fi
}
skip() {
  echo "SKIP: $1"
  if [[ "${QSCOPE_FAIL_ON_SKIP:-}" == 1 || "${CI:-}" == true ]]; then
    echo "FAIL: skipped in CI, which counts as a failure" >&2
    fail=1
  fi
}

# ---- build and unpack -------------------------------------------------------------------
(cd "$build" && cpack -G DEB -B "$work/out" > "$work/cpack.log" 2>&1) || { cat "$work/cpack.log"; exit 1; }
debs=("$work"/out/qscope_*.deb)
[[ -f ${debs[0]} ]] || { echo "FAIL: cpack made no qscope_*.deb" >&2; cat "$work/cpack.log"; exit 1; }
deb=${debs[0]}
echo "package: $(basename "$deb"), $(stat -c %s "$deb") bytes"
root=$work/root
dpkg-deb -x "$deb" "$root"

field() { dpkg-deb -f "$deb" "$1"; }
version=$(field Version)
check "control: Package is qscope" test "$(field Package)" = qscope
check "control: Depends found by dpkg-shlibdeps (libbpf)" grep -q 'libbpf' <<< "$(field Depends)"
check "maintainer scripts: postinst prerm postrm" \
  bash -c "dpkg-deb --ctrl-tarfile '$deb' | tar -t | grep -c -E '^\./(postinst|prerm|postrm)$' | grep -qx 3"

# ---- the files a host gets -----------------------------------------------------------------
for f in usr/bin/qscope usr/share/man/man1/qscope.1 usr/lib/systemd/system/qscope-exporter@.service \
         usr/share/qscope/qscope.json usr/share/qscope/alerts.yml \
         usr/share/qscope/provisioning/dashboards/qscope.yaml \
         usr/share/qscope/provisioning/datasources/qscope-prometheus.yaml \
         usr/share/qscope/systemd/qscope-exporter.default \
         usr/share/doc/qscope/grafana.md usr/share/doc/qscope/security.md; do
  check "installed: /$f" test -s "$root/$f"
done
check "dashboard and rules are the repository's" \
  bash -c "cmp '$src/dashboards/qscope.json' '$root/usr/share/qscope/qscope.json' &&
           cmp '$src/dashboards/alerts.yml' '$root/usr/share/qscope/alerts.yml'"
check "no @QSCOPE_PREFIX@ left in any file" bash -c "! grep -rl '@QSCOPE_PREFIX@' '$root'"

# ---- the binary ---------------------------------------------------------------------------
out=$("$root/usr/bin/qscope" --version 2>&1) || true
echo "installed qscope --version: $out"
check "qscope --version is the package's version ($version)" test "$out" = "qscope $version"

# ---- the unit -----------------------------------------------------------------------------
unit=$root/usr/lib/systemd/system/qscope-exporter@.service
check "unit runs the packaged binary" grep -qx 'ExecStart=/usr/bin/qscope export $QSCOPE_ARGS' "$unit"
if ! command -v systemd-analyze > /dev/null; then
  skip "systemd-analyze not installed (package systemd): the unit is not verified"
else
  # An instance of the template; ExecStart points into the scratch root, where the binary
  # is (the line above checks the real path). man(1) finds qscope(1) there too, so the
  # unit's Documentation= is checked against the packaged man page.
  mkdir -p "$work/units"
  inst=$work/units/qscope-exporter@example.service
  sed "s|^ExecStart=/usr/bin/qscope |ExecStart=$root/usr/bin/qscope |" "$unit" > "$inst"
  man_opt=()
  if ! command -v man > /dev/null; then
    skip "man not installed (package man-db): the unit's Documentation=man:qscope(1) is not checked"
    man_opt=(--man=no)
  fi
  # verify exits 0 on a misspelt key or an unparsable value ("..., ignoring"): any output
  # is a finding.
  verify() {
    local out rc=0
    out=$(MANPATH="$root/usr/share/man" systemd-analyze verify "${man_opt[@]}" "$inst" 2>&1) || rc=$?
    [[ -n $out ]] && echo "$out"
    [[ $rc == 0 && -z $out ]]
  }
  check "systemd-analyze verify qscope-exporter@.service: no errors, no warnings" verify
  if systemd-analyze security --help 2>&1 | grep -q -- --offline; then
    score=$(systemd-analyze security --offline=true "$inst" 2>&1 | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    echo "systemd-analyze security: exposure $score (0 = fully sandboxed, 10 = none)"
    check "exposure score at most 3.0" awk -v s="${score:-99}" 'BEGIN { exit !(s <= 3.0) }'
  else
    skip "systemd-analyze without --offline (systemd < 250): exposure not scored"
  fi
fi

exit $fail
