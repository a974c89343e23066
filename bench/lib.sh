# Sourced by the bench scripts: their shared flags, the root check and the build step.

# bench_args NAME "$@": --rounds N (5), --seconds S (5), --out FILE, --parts P (abc; overhead.sh)
# → ROUNDS, SECS, OUT, PARTS.
bench_args() {
  local name=$1; shift
  ROUNDS=5 SECS=5 OUT="" PARTS=abc
  while [[ $# -gt 0 ]]; do
    case $1 in
      --rounds) ROUNDS=$2; shift 2;;
      --seconds) SECS=$2; shift 2;;
      --out) OUT=$2; shift 2;;
      --parts) PARTS=$2; shift 2;;
      *) echo "usage: $0 [--rounds N] [--seconds S] [--out FILE] [--parts abc]" >&2; exit 2;;
    esac
  done
  [[ $(id -u) -eq 0 ]] || { echo "$name: needs root (BPF)" >&2; exit 1; }
}

# bench_build TARGET...: B = the build dir (QSCOPE_BUILD_DIR, default build), the targets
# built there first — unless QSCOPE_BENCH_NO_BUILD=1: measure the binaries as built (a
# shared tree changes under you).
bench_build() {
  B=${QSCOPE_BUILD_DIR:-build}
  [[ -n ${QSCOPE_BENCH_NO_BUILD:-} ]] || cmake --build "$B" -j2 --target "$@" >/dev/null
}

# bench_nginx DIR PORT [ssl]: nginx serving a static 2-byte response on 127.0.0.1:PORT (the
# worst case: ~4 us per request), its files under DIR (pid in DIR/nginx.pid); one worker, so
# the worker is the one process qscope targets. `ssl`: HTTPS, with a self-signed certificate,
# HTTP/1.1 or HTTP/2 by ALPN, connections never closed for their request count (nginx's
# default of 1000 would end h2load's, which does not reconnect).
bench_nginx() {
  local dir=$1 port=$2 ssl="" tls=""
  mkdir -p "$dir/nginx/logs"
  if [[ ${3:-} == ssl ]]; then
    openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
      -keyout "$dir/key.pem" -out "$dir/cert.pem" 2>/dev/null
    ssl=" ssl http2" tls="ssl_certificate $dir/cert.pem; ssl_certificate_key $dir/key.pem; keepalive_requests 1000000;"
  fi
  cat >"$dir/nginx.conf" <<NGX
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/nginx/logs/error.log warn;
events { worker_connections 1024; }
http { access_log off; $tls
       server { listen 127.0.0.1:$port$ssl backlog=1024; location / { return 200 "ok"; } } }
NGX
  nginx -c "$dir/nginx.conf" -p "$dir/nginx"
}

# Per-program stats of qscope's programs (names are set by our .bpf.c files).
# Only programs held by collector $1 (prog ids from its fds' fdinfo; this bpftool reports no
# pids): other qscope instances on a shared machine load programs with the same names.
prog_stats() { bpftool prog show -j 2>/dev/null | python3 -c '
import json,sys,os,re
d="/proc/%s/fdinfo" % sys.argv[1]; ids=set()
for f in os.listdir(d):
    try: m=re.search(r"^prog_id:\s*(\d+)", open(os.path.join(d,f)).read(), re.M)
    except OSError: continue
    if m: ids.add(int(m.group(1)))
for p in json.load(sys.stdin):
    if p.get("id") in ids: print(p.get("name","?"), p.get("run_cnt", 0), p.get("run_time_ns", 0))' "$1"; }

# Programs between two prog_stats outputs: "NAME NS_PER_RUN RUNS" for each program whose name
# starts with one of PREFIX... and that ran in between.
prog_delta() { python3 - "$@" <<'PY'
import sys
def parse(t):
    d = {}
    for l in t.splitlines():
        n, c, ns = l.split()
        a = d.setdefault(n, [0, 0]); a[0] += int(c); a[1] += int(ns)
    return d
a, b, prefixes = parse(sys.argv[1]), parse(sys.argv[2]), tuple(sys.argv[3:])
for n in sorted(b):
    if not n.startswith(prefixes): continue
    c = b[n][0] - a.get(n, [0, 0])[0]; ns = b[n][1] - a.get(n, [0, 0])[1]
    if c > 0: print(n, "%.1f" % (ns / c), c)
PY
}

# The sock family's programs between two prog_stats outputs.
sock_prog_delta() { prog_delta "$1" "$2" qs_recv qs_send qs_set_state qs_data_ready qs_arrival_skb qs_close; }

# bench_begin NAME: what every bench starts with: $work (a scratch directory under /tmp),
# pids[] and int_pids[] empty, bench_cleanup as the exit trap, and old_stats (the value of
# kernel.bpf_stats_enabled to restore, whether or not the bench turns it on).
bench_begin() {
  work=$(mktemp -d "/tmp/qscope-$1-XXXXXX")
  pids=() int_pids=() cgroups=()
  trap bench_cleanup EXIT
  old_stats=$(sysctl -n kernel.bpf_stats_enabled)
}

# The one exit trap of every bench (trap 'bench_cleanup [PATH...]' EXIT), however it exits:
# stops what the script started (pids[]: SIGTERM; int_pids[]: SIGINT, so qscope and the
# libbpf tools detach and print), the nginx whose pid file is under $work, restores
# kernel.bpf_stats_enabled when old_stats holds its value from before, and removes $work and
# PATH...
bench_cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${int_pids[@]}"; do kill -INT "$p" 2>/dev/null || true; done
  local f c
  for f in "${work:-/nonexistent}"/nginx.pid "${work:-/nonexistent}"/*/nginx.pid; do
    [[ -f $f ]] && kill "$(cat "$f")" 2>/dev/null || true
  done
  [[ -n ${old_stats:-} ]] && sysctl -qw kernel.bpf_stats_enabled="$old_stats" || true
  wait 2>/dev/null || true
  # A cgroup goes once its processes have (nginx's workers exit after their master's signal).
  for c in "${cgroups[@]}"; do for _ in $(seq 100); do rmdir "$c" 2>/dev/null && break; sleep 0.05; done; done
  rm -rf "${work:-}" "$@"
}

# bench_cgroup NAME: a cgroup v2 directory of the bench's own in $bench_cg, removed by
# bench_cleanup (so not called in a $(...) subshell, which would lose it from cgroups[]);
# exits when no cgroup2 hierarchy is mounted.
bench_cgroup() {
  local mount
  mount=$(awk '$3 == "cgroup2" {print $2; exit}' /proc/mounts)
  [[ -n $mount ]] || { echo "bench: no cgroup2 mount: the cgroup condition needs one" >&2; exit 1; }
  bench_cg=$mount/qscope-bench-$1-$$
  mkdir "$bench_cg"
  cgroups+=("$bench_cg")
}
