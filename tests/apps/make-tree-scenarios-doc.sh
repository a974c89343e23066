#!/usr/bin/env bash
# Regenerates docs/scenarios-trees.md from real runs: qscope given the PID an operator has at
# hand for process-tree servers: nginx (master + 2 workers in front of a slow upstream),
# PostgreSQL (postmaster + backends contending for one row), gunicorn (arbiter + 3 sync
# workers, more clients than workers), Apache httpd (event MPM: processes of threads), with
# the servers' own view (stub_status, pg_stat_activity, ss) taken alongside. Needs root;
# loopback only; ~2 min.
#   sudo tests/apps/make-tree-scenarios-doc.sh [BUILD_DIR=build]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
B=$(realpath "${1:-$root/build}")
Q=$B/qscope T=$B/targets
out=$root/docs/scenarios-trees.md
work=$(mktemp -d /tmp/qscope-trees-XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [[ -f $work/nginx.pid ]] && kill -QUIT "$(cat "$work/nginx.pid")" 2>/dev/null || true
  bash "$root/tests/apps/pg.sh" stop "$work/pg" >/dev/null 2>&1 || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# --- nginx: master PID, two workers, a 100 ms upstream ----------------------------------
$T/qs_server --port 25311 --workers 64 --service-ms 100 --backlog 256 >"$work/up.log" 2>&1 & pids+=($!)
mkdir -p "$work/logs" "$work/tmp"
cat >"$work/nginx.conf" <<NGX
user root;
worker_processes 2;
pid $work/nginx.pid;
error_log $work/logs/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $work/tmp/body; proxy_temp_path $work/tmp/proxy;
  fastcgi_temp_path $work/tmp/fastcgi; uwsgi_temp_path $work/tmp/uwsgi; scgi_temp_path $work/tmp/scgi;
  upstream slow { server 127.0.0.1:25311; keepalive 64; }
  server {
    listen 127.0.0.1:25310 backlog=511;
    location = /nginx_status { stub_status; }
    location / { proxy_pass http://slow; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NGX
nginx -c "$work/nginx.conf" -p "$work"
sleep 1
master=$(cat "$work/nginx.pid")
wrk -t2 -c40 -d12s http://127.0.0.1:25310/ >/dev/null 2>&1 & pids+=($!)
sleep 2
$Q snapshot --pid "$master" --duration 5 >"$work/nginx.txt" 2>/dev/null
curl -s http://127.0.0.1:25310/nginx_status >"$work/nginx_status.txt"
wait "${pids[-1]}" 2>/dev/null || true

# --- PostgreSQL: postmaster PID, 12 clients updating one row ------------------------------
bash "$root/tests/apps/pg.sh" start "$work/pg" 25432 >/dev/null
pm=$(head -1 "$work/pg/data/postmaster.pid")
P="-h 127.0.0.1 -p 25432 -U postgres"
psql $P -d postgres -qc "create table hot(id int primary key, v int); insert into hot values (1, 0);"
printf 'BEGIN;\nUPDATE hot SET v = v + 1 WHERE id = 1;\nSELECT pg_sleep(0.02);\nEND;\n' >"$work/lock.sql"
pgbench $P -n -f "$work/lock.sql" -c 12 -j 2 -T 12 postgres >"$work/pgbench.txt" 2>&1 & pids+=($!)
sleep 2
$Q snapshot --pid "$pm" --duration 5 >"$work/pg.txt" 2>/dev/null
psql $P -d postgres -Atc "select coalesce(wait_event_type, '-') || ' ' || coalesce(wait_event, '-') as wait, count(*) from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid() group by 1 order by 2 desc" >"$work/pg_activity.txt"
wait "${pids[-1]}" 2>/dev/null || true

# --- gunicorn: arbiter PID, 3 sync workers, a 0.2 s handler, 10 clients ---------------------
cat >"$work/app.py" <<'PY'
import time
def app(environ, start_response):
    time.sleep(0.2)
    start_response('200 OK', [('Content-Length', '2')])
    return [b'ok']
PY
gunicorn --chdir "$work" -w 3 -b 127.0.0.1:25340 --backlog 64 --graceful-timeout 1 app:app >"$work/gunicorn.log" 2>&1 & pids+=($!)
arbiter=$!
for _ in $(seq 100); do [[ $(cat /proc/$arbiter/task/*/children 2>/dev/null | wc -w) -ge 3 ]] && break; sleep 0.1; done
$T/qs_load --host 127.0.0.1 --port 25340 --connections 10 --duration 10 --new-conn-per-request >/dev/null 2>&1 & pids+=($!)
sleep 2
$Q snapshot --pid "$arbiter" --duration 5 >"$work/gunicorn.txt" 2>/dev/null
ss -lnt "sport = :25340" >"$work/gunicorn_ss.txt"
wait "${pids[-1]}" 2>/dev/null || true

# --- Apache httpd: parent PID, event MPM, 2 processes x 4 threads, a 100 ms backend ----------
$T/qs_server --port 25351 --workers 64 --service-ms 100 >"$work/ap_up.log" 2>&1 & pids+=($!)
mods=/usr/lib/apache2/modules
mkdir -p "$work/ap/logs"
cat >"$work/ap/httpd.conf" <<AP
ServerRoot $work/ap
PidFile $work/ap/httpd.pid
ErrorLog $work/ap/logs/error.log
LoadModule mpm_event_module $mods/mod_mpm_event.so
LoadModule authz_core_module $mods/mod_authz_core.so
LoadModule proxy_module $mods/mod_proxy.so
LoadModule proxy_http_module $mods/mod_proxy_http.so
User www-data
Group www-data
ServerName localhost
Listen 127.0.0.1:25350
StartServers 2
ServerLimit 2
ThreadsPerChild 4
MaxRequestWorkers 8
MinSpareThreads 1
MaxSpareThreads 8
ProxyPass /slow http://127.0.0.1:25351/
AP
apache2 -f "$work/ap/httpd.conf" -DFOREGROUND >"$work/ap/out.log" 2>&1 & pids+=($!)
parent=$!
for _ in $(seq 100); do [[ $(cat /proc/$parent/task/*/children 2>/dev/null | wc -w) -ge 2 ]] && break; sleep 0.1; done
wrk -t1 -c24 -d10s http://127.0.0.1:25350/slow >"$work/apache_wrk.txt" 2>&1 & pids+=($!)
sleep 2
$Q snapshot --pid "$parent" --duration 5 >"$work/apache.txt" 2>/dev/null
ss -lnt "sport = :25350" >"$work/apache_ss.txt"
wait "${pids[-1]}" 2>/dev/null || true

{
  echo "# Process trees as an operator sees them"
  echo
  echo "Generated by \`tests/apps/make-tree-scenarios-doc.sh\` on $(date -u +%Y-%m-%d) from real runs on"
  echo "loopback (Debian 12 packages: nginx $(nginx -v 2>&1 | sed 's/.*\///'), PostgreSQL $(pg_config --version | awk '{print $2}'))."
  echo "In each case qscope was given the PID an operator has at hand: nginx's master, PostgreSQL's"
  echo "postmaster, gunicorn's arbiter, Apache's parent. All serve from child processes; qscope follows them"
  echo "(\`--no-children\` would not)."
  echo
  echo "## nginx: two workers in front of a 100 ms upstream, 40 clients"
  echo
  echo "\`qscope snapshot --pid \$(cat nginx.pid) --duration 5\`:"
  echo
  echo '```'
  cat "$work/nginx.txt"
  echo '```'
  echo
  echo "nginx's own view (\`stub_status\`) right after, for comparison:"
  echo
  echo '```'
  cat "$work/nginx_status.txt"
  echo '```'
  echo
  echo "## PostgreSQL: 12 clients updating the same row"
  echo
  echo "Each transaction takes the row lock, holds it 20 ms and commits; the other 11 clients wait"
  echo "for it. PostgreSQL backends wait for a row lock on their latch, in \`epoll_wait\` under"
  echo "\`ProcSleep\` — the same syscall as a backend idle between queries — so the syscall alone"
  echo "would read as \"nothing waiting\"; the stack says it is a lock."
  echo
  echo "\`qscope snapshot --pid \$(head -1 \$PGDATA/postmaster.pid) --duration 5\`:"
  echo
  echo '```'
  cat "$work/pg.txt"
  echo '```'
  echo
  echo "PostgreSQL's own view (\`pg_stat_activity\`, client backends by wait event) right after:"
  echo
  echo '```'
  cat "$work/pg_activity.txt"
  echo '```'
  echo
  echo "pgbench's summary:"
  echo
  echo '```'
  grep -E 'tps|latency average|number of transactions actually' "$work/pgbench.txt" || true
  echo '```'
  echo
  echo "## gunicorn: three sync workers, a 0.2 s handler, 10 clients"
  echo
  echo "A sync worker serves one request at a time, so three are busy and the other clients'"
  echo "connections wait in the kernel's accept queue of the one listening socket the arbiter and"
  echo "its workers share (Debian's gunicorn $(gunicorn --version 2>&1 | awk '{print $NF}' | tr -d '()'))."
  echo
  echo "\`qscope snapshot --pid \$(pgrep -o gunicorn) --duration 5\`:"
  echo
  echo '```'
  cat "$work/gunicorn.txt"
  echo '```'
  echo
  echo "The kernel's view (\`ss -lnt\`, Recv-Q is the accept queue) right after:"
  echo
  echo '```'
  cat "$work/gunicorn_ss.txt"
  echo '```'
  echo
  echo "## Apache httpd: the event MPM, 2 processes of 4 threads, a 100 ms backend, 24 clients"
  echo
  echo "\`MaxRequestWorkers 8\`: the 8 worker threads proxy to the backend; each process's listener"
  echo "thread stops accepting while its threads are all taken, and the other clients' connections"
  echo "wait in the kernel's accept queue. A worker process here holds 4 requests at once, so qscope"
  echo "counts the requests in flight between the processes rather than calling each \"busy\""
  echo "($(apache2 -v 2>/dev/null | sed -n 's/^Server version: //p'))."
  echo
  echo "\`qscope snapshot --pid \$(cat httpd.pid) --duration 5\`:"
  echo
  echo '```'
  cat "$work/apache.txt"
  echo '```'
  echo
  echo "The kernel's view (\`ss -lnt\`) right after:"
  echo
  echo '```'
  cat "$work/apache_ss.txt"
  echo '```'
  echo
  echo "The client's (wrk, over its whole 10 s; the snapshot saw 5 of them). Its read errors are the"
  echo "connections Apache closed under a request, \"dropped\" above; qscope counts a lower bound, as a"
  echo "request that reaches the host after the close finds no socket of Apache's (docs/json.md):"
  echo
  echo '```'
  grep -E 'requests in|Socket errors' "$work/apache_wrk.txt" || echo "(no socket errors)"
  echo '```'
} >"$out"
echo "wrote $out"
