#!/usr/bin/env bash
# Builds qscope(1) from the binary's own --help, so the man page cannot drift from the flags:
# help2man renders `qscope --help`, this script adds one subsection per subcommand from
# `qscope SUB --help`, and docs/qscope.h2m adds what --help does not say (exit status,
# privileges, files). Run by the build (top-level CMakeLists.txt, "install"):
#   docs/qscope-man.sh QSCOPE_BINARY docs/qscope.h2m OUT
# OUT keeps @QSCOPE_PREFIX@ placeholders; the install step fills in the prefix.
set -euo pipefail
bin=$1 include=$2 out=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The help text has two non-ASCII characters, which help2man turns into "?" outside some
# locales: qscope's output reaches help2man and this script with them spelled out, and the
# page gets the roff glyphs.
printf '#!/usr/bin/env bash\nset -o pipefail\n"%s" "$@" | sed -e "s/—/QSCOPE_EM_DASH/g" -e "s/→/QSCOPE_ARROW/g"\n' \
  "$bin" > "$work/qscope"
chmod +x "$work/qscope"

# CLI11's help (description line, "Usage:", "Options:"/"Advanced:" groups, options at column
# 2 with their text at column 30 or on the next lines) as roff: one .TP per option.
subcommand_roff() {
  "$work/qscope" "$1" --help | awk '
    function esc(s) {
      gsub(/\\/, "\\e", s); gsub(/-/, "\\-", s)
      return s
    }
    function line(s) { s = esc(s); if (s ~ /^[.\047]/) s = "\\&" s; print s }
    NR == 1 { desc = $0; next }
    /^Usage: / { u = $0; sub(/^Usage: /, "", u); print ".SS \"" esc(u) "\""; line(desc); next }
    /^[A-Za-z][^ ]*:$/ { print ".PP"; print "\\fI" esc($0) "\\fR"; next }
    /^  -/ {
      s = $0; sub(/^  /, "", s); text = ""
      if (match(s, /   */)) { text = substr(s, RSTART + RLENGTH); s = substr(s, 1, RSTART - 1) }
      name = s; rest = ""
      if (match(s, / /)) { name = substr(s, 1, RSTART - 1); rest = substr(s, RSTART) }
      print ".TP"; print "\\fB" esc(name) "\\fR" esc(rest)
      if (text != "") line(text)
      next
    }
    /^      *[^ ]/ { s = $0; sub(/^ +/, "", s); line(s); next }
  '
}

{
  cat "$include"
  echo "[COMMANDS]"
  for sub in top snapshot export; do subcommand_roff "$sub"; done
} > "$work/qscope.h2m"

help2man --no-info --no-discard-stderr --include "$work/qscope.h2m" --output "$work/qscope.1" "$work/qscope"
sed -i -e 's/QSCOPE_EM_DASH/\\(em/g' -e 's/QSCOPE_ARROW/\\(->/g' "$work/qscope.1"
# ASCII only, so any man(1) renders it the same.
if LC_ALL=C grep -n '[^ -~	]\|???' "$work/qscope.1"; then
  echo "qscope-man.sh: characters help2man could not carry (above): spell them out in this script" >&2
  exit 1
fi
mv "$work/qscope.1" "$out"
