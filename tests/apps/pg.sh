#!/bin/bash
# A private PostgreSQL cluster on loopback for the scenario tests.
#   pg.sh start DIR [PORT]   initdb (first time) and start; waits until it accepts queries
#   pg.sh stop DIR           fast shutdown; DIR is kept
#   pg.sh psql DIR [PORT] -c SQL
# PostgreSQL refuses to run as root, so everything runs as the `postgres` user (Debian's
# postgresql-common creates it). Trust auth on 127.0.0.1 only; unix socket inside DIR.
set -euo pipefail
cmd=${1:-}; dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: pg.sh start|stop|psql DIR [PORT] [psql args]" >&2; exit 2; }
port=${3:-23432}

bindir=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/pg_ctl" ] && bindir=$d; done
[ -n "$bindir" ] || { echo "pg.sh: no PostgreSQL server found (apt-get install postgresql)" >&2; exit 1; }
id postgres >/dev/null 2>&1 || { echo "pg.sh: no 'postgres' user to run the server as" >&2; exit 1; }

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
        chown postgres: "$dir"
        as_pg test -x "$dir" || { echo "pg.sh: user postgres cannot reach $dir: make its parent directories traversable (chmod o+x)" >&2; exit 1; }
    fi
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        as_pg "$bindir/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; exit 1; }
    fi
    if as_pg "$bindir/pg_ctl" -D "$dir/data" status >/dev/null 2>&1; then exit 0; fi
    # max_connections leaves room for the pool (10), the oracles and a few psql sessions.
    as_pg "$bindir/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 start \
        -o "-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$dir -c max_connections=50 -c shared_buffers=32MB -c fsync=off -c logging_collector=off" \
        >/dev/null || { tail -20 "$dir/server.log" >&2; exit 1; }
    for _ in $(seq 50); do
        as_pg "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atqc 'select 1' >/dev/null 2>&1 && exit 0
        sleep 0.2
    done
    echo "pg.sh: server on 127.0.0.1:$port did not answer" >&2; exit 1
    ;;
stop)
    [ -f "$dir/data/PG_VERSION" ] || exit 0
    as_pg "$bindir/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1 || true
    ;;
psql)
    shift 3 || shift $#
    "$bindir/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -Atq "$@"
    ;;
*) echo "pg.sh: unknown command '$cmd'" >&2; exit 2 ;;
esac
