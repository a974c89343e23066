#!/usr/bin/env bash
# CI extra: libFuzzer on every parser of foreign input (ctest extra.fuzz). The rest of the
# suite already runs under ASan+UBSan: tests/run.sh builds it sanitized.
#   tests/ci-extra.sh [fuzz]      build the fuzzers, then fuzz
#   tests/ci-extra.sh fuzz-build  build them only (tests/run.sh does so in its background lane,
#                                 while the integration tests leave cores idle)
# Env: FUZZ_SECONDS (default 20 per fuzzer), QSCOPE_FUZZ_DIR (build-fuzz), JOBS (nproc).
# Budget: ~3 minutes on 2 cores: 1.5 compiling with coverage what is fuzzed and what it calls
# (tests/CMakeLists.txt names the layer each fuzzer links and the files it compiles), 1.5 fuzzing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
what=${1:-fuzz}
jobs=${JOBS:-$(nproc)}
fuzz_seconds=${FUZZ_SECONDS:-20}
fuzz_dir=${QSCOPE_FUZZ_DIR:-build-fuzz}
fail=0

cxx=$(command -v clang++ || command -v clang++-14 || true)
cc=$(command -v clang || command -v clang-14 || true)

# Seeds from the live system: real-shaped input lets 20 s of fuzzing reach deep paths.
make_seeds() {
  local c=$1
  mkdir -p "$c"/fuzz_proc_stat "$c"/fuzz_perf_map "$c"/fuzz_kallsyms "$c"/fuzz_proc_maps \
           "$c"/fuzz_sock_diag "$c"/fuzz_proc_fds "$c"/fuzz_prom_escape "$c"/fuzz_unix_diag
  cat /proc/self/stat > "$c/fuzz_proc_stat/self"
  cat /proc/1/stat > "$c/fuzz_proc_stat/init"
  printf '123 (a b) c) (d) S 1 123 123 0 -1 4194560 1 0 0 0 5 6 0 0 20 0 7 0 1234 1 1 1\n' \
    > "$c/fuzz_proc_stat/paren"
  printf '7f0000001000 40 Interpreter\n0x7f0000002000 0x80 LFoo;::bar (compiled)\n7f0000001000 20 replaced\n' \
    > "$c/fuzz_perf_map/jit"
  { grep -m 200 ' [tT] ' /proc/kallsyms; grep -m 50 '\[' /proc/kallsyms || true; } > "$c/fuzz_kallsyms/real"
  printf 'ffffffff81000000 T _stext\nffffffff81000100 t foo\t[mod]\n0000000000000000 T zeroed\n' \
    > "$c/fuzz_kallsyms/small"
  cat /proc/self/maps > "$c/fuzz_proc_maps/self"
  printf '7f00-7f10 r-xp 00000000 fd:01 42 /usr/lib/a b.so (deleted)\n7f10-7f20 rwxp 00000000 00:00 0 \n' \
    > "$c/fuzz_proc_maps/odd"
  printf 'socket:[12345]' > "$c/fuzz_proc_fds/sock"
  printf 'pipe:[1]' > "$c/fuzz_proc_fds/pipe"
  printf 'worker "a"\\b\nc\xff\xfe' > "$c/fuzz_prom_escape/mixed"
  printf 'http-nio-8080-exec-17' > "$c/fuzz_prom_escape/name"
  mkdir -p "$c"/fuzz_proc_tasks "$c"/fuzz_jvm_dump "$c"/fuzz_elf "$c"/fuzz_frames
  cat /proc/self/net/tcp > "$c/fuzz_proc_tasks/tcp"
  cat /proc/self/net/tcp6 > "$c/fuzz_proc_tasks/tcp6"
  printf '202 0x7ffd 0x80 0x0 0x0 0x0 0x0 0x7ffe0000 0x7f0000001000\n' > "$c/fuzz_proc_tasks/syscall"
  printf 'running\n' > "$c/fuzz_proc_tasks/running"
  printf '"main" #1 [4242] prio=5 os_prio=0 cpu=1.2ms elapsed=3.4s tid=0x00007f0000001000 nid=4242 waiting\n"ForkJoinPool-1-worker-3" #30 daemon [4300] prio=5 tid=0x00007f0000002000 nid=4300 waiting\n' \
    > "$c/fuzz_jvm_dump/print"
  printf '{"threadDump":{"processId":"1","threadContainers":[{"container":"<root>","threads":[{"tid":"31","name":"","stack":["java.base/java.lang.VirtualThread.park(VirtualThread.java:1)","java.base/java.util.concurrent.SynchronousQueue.poll(SynchronousQueue.java:338)","app.Pool.get(Pool.java:9)"]}]}]}}' \
    > "$c/fuzz_jvm_dump/dump"
  head -c 65536 "$(command -v true)" > "$c/fuzz_elf/true"
  printf 'pool_borrow()+0x3e (qs_server)' > "$c/fuzz_frames/frame"
  printf '(anonymous namespace)::serve_connection(int) const+0x10 (libfoo.so.1)' > "$c/fuzz_frames/cxx"
  printf 'http-nio-8080-exec-17' > "$c/fuzz_frames/comm"
  # Recordings: the first byte 0 (a whole file) or 1 (a tick's payload), from the unit tests'
  # fixtures (tests/unit/record_test.cpp writes them).
  mkdir -p "$c"/fuzz_recording
  { printf '\x00'; cat "$root/tests/unit/fixtures/recording.qsrec"; } > "$c/fuzz_recording/file"
  { printf '\x01'; cat "$root/tests/unit/fixtures/recording_tick.bin"; } > "$c/fuzz_recording/payload"
  mkdir -p "$c"/fuzz_selectors
  printf '# targets\nshop   port:8080\nstock cmdline:java .*stock\\.jar\ndb pidfile:/run/pg.pid\n' > "$c/fuzz_selectors/config"
  cat /proc/self/cgroup > "$c/fuzz_selectors/cgroup"
  cat /proc/mounts > "$c/fuzz_selectors/mounts"
  printf '1234\n' > "$c/fuzz_selectors/pidfile"
  # A sock_diag seed: a 16-byte NLMSG_DONE header (len 20, type 3) plus a 4-byte payload.
  printf '\x14\x00\x00\x00\x03\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' \
    > "$c/fuzz_sock_diag/done"
  cp "$root/tests/unit/fixtures/unix_diag_sockets.bin" "$c/fuzz_unix_diag/captured"
}

fuzzer_names() {
  local f
  for f in tests/fuzz/*.cpp; do basename "$f" .cpp; done
}

build_fuzzers() {
  if [[ -z "$cxx" || -z "$cc" ]]; then
    echo "ci-extra: clang not found: fuzzers need clang (libFuzzer)" >&2
    return 1
  fi
  local lock
  mkdir -p "$fuzz_dir"
  # One build of the tree at a time: run.sh's background lane may still be building it.
  exec {lock}>"$fuzz_dir.lock"
  flock "$lock"
  # Every object (the qscope libraries included) carries coverage instrumentation, or the fuzzer
  # would be blind inside the very parsers it is meant to explore.
  cmake -S . -B "$fuzz_dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQSCOPE_FUZZ=ON \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" \
    -DCMAKE_CXX_FLAGS="-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
  local rc=0
  cmake --build "$fuzz_dir" -j"$jobs" --target $(fuzzer_names) || rc=$?
  exec {lock}>&-
  return $rc
}

run_fuzz() {
  build_fuzzers || return 1
  local names
  mapfile -t names < <(fuzzer_names)
  local corpus="$fuzz_dir/corpus"
  make_seeds "$corpus"
  # Under tests/run.sh the sanitizers log to files; a fuzzer's report belongs in its own
  # log, next to the reproducer. UB must crash, or libFuzzer never saves the input.
  unset ASAN_OPTIONS LSAN_OPTIONS
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # One fuzzer per core at a time: the wall time is what the CI budget counts.
  local pids=() batch=()
  check_batch() {
    local i
    for i in "${!pids[@]}"; do
      local n=${batch[$i]}
      if ! wait "${pids[$i]}"; then
        echo "ci-extra: FUZZ FAILURE in $n; reproducer in $fuzz_dir/crashes/$n/:" >&2
        grep -E 'ERROR|SUMMARY|runtime error|#[0-9]+ 0x.* in (qscope|LLVMFuzzer)' "$fuzz_dir/$n.log" | head -20 >&2 || true
        fail=1
      else
        echo "== $n: $(grep -E 'stat::number_of_executed_units|stat::peak_rss_mb' "$fuzz_dir/$n.log" | tr -s ' \n' ' ')"
      fi
    done
    pids=() batch=()
  }
  for n in "${names[@]}"; do
    mkdir -p "$corpus/$n" "$fuzz_dir/crashes/$n"
    echo "== fuzz $n (${fuzz_seconds}s)"
    # -timeout: one input taking >10 s is a hang, reported like a crash.
    "$fuzz_dir/tests/$n" -max_total_time="$fuzz_seconds" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$fuzz_dir/crashes/$n/" "$corpus/$n" \
      >"$fuzz_dir/$n.log" 2>&1 &
    pids+=($!) batch+=("$n")
    if (( ${#pids[@]} >= jobs )); then check_batch; fi
  done
  check_batch
}

start=$SECONDS
case "$what" in
  fuzz) run_fuzz || fail=1 ;;
  fuzz-build) build_fuzzers || fail=1 ;;
  *) echo "usage: tests/ci-extra.sh [fuzz|fuzz-build]" >&2; exit 2 ;;
esac
echo "ci-extra: $what done in $((SECONDS - start)) s: $([[ $fail -eq 0 ]] && echo PASS || echo FAIL)"
exit $fail
