#!/bin/bash
# Compile the scenario app with Temurin 25's javac against Debian's jars.
# usage: build.sh OUTDIR   → OUTDIR/classes, OUTDIR/app.env (JAVA_HOME=..., CLASSPATH=...)
# Rebuilds only when a source is newer than the classes.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build.sh OUTDIR}
mkdir -p "$out"

# The JDK is found by its version, never by a hard-coded directory name.
jdk=""
for rel in /usr/lib/jvm/*/release; do
    if grep -q '^JAVA_VERSION="25' "$rel" 2>/dev/null; then jdk=$(dirname "$rel"); break; fi
done
[ -n "$jdk" ] || { echo "build.sh: no JDK 25 under /usr/lib/jvm (want a release file with JAVA_VERSION=\"25...)" >&2; exit 1; }

jars=(tomcat10-embed-core.jar HikariCP.jar postgresql.jar slf4j-api.jar slf4j-simple.jar)
cp=""
for j in "${jars[@]}"; do
    f=/usr/share/java/$j
    [ -f "$f" ] || { echo "build.sh: missing $f (apt-get install libtomcat10-embed-java libhikaricp-java libpostgresql-jdbc-java libslf4j-java)" >&2; exit 1; }
    cp=${cp:+$cp:}$f
done

srcs=$(find "$here/src" -name '*.java' | sort)
stamp="$out/classes/.built"
need=1
if [ -f "$stamp" ] && [ -z "$(find "$here/src" -name '*.java' -newer "$stamp")" ]; then need=0; fi
if [ $need = 1 ]; then
    rm -rf "$out/classes"
    mkdir -p "$out/classes"
    # shellcheck disable=SC2086
    "$jdk/bin/javac" -nowarn --release 25 -d "$out/classes" -cp "$cp" $srcs
    touch "$stamp"
fi
printf 'JAVA_HOME=%s\nCLASSPATH=%s\n' "$jdk" "$out/classes:$cp" > "$out/app.env"
echo "$out/app.env"
