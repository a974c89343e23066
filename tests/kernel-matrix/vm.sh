#!/usr/bin/env bash
# Boots a packaged Debian kernel under QEMU (TCG: no KVM needed) with an initramfs holding
# busybox, qscope, the test targets and their libraries, runs one guest script as /init's
# payload, and prints the guest's serial console. The host-side test parses that log.
#
#   vm.sh BUILD_DIR KERNEL GUEST_SCRIPT [TIMEOUT_S]
#     KERNEL  a Debian package name pattern, e.g. 'linux-image-6.1.0-*-cloud-amd64-unsigned'
#             (the newest matching name in the local apt lists is used), or SUITE:PATTERN for
#             another Debian release's kernel, e.g. 'bullseye:linux-image-5.10.0-*-cloud-amd64-unsigned'
#             (Debian 11's 5.10): that suite's lists are kept beside the cache, apart from the
#             host's apt state, and the newest package that downloads is used (a mirror may
#             hold only some of a suite's security updates)
#
# QSCOPE_KM_MODES: the attach types smoke.sh runs the socket cases under ("auto kprobe" when
# unset; auto is qscope's own choice, the others QSCOPE_SOCK_ATTACH values).
# The .deb and its extracted kernel are cached under BUILD_DIR/kernel-matrix/cache: a re-run
# downloads nothing. QSCOPE_KM_DIR moves that directory (cache, initramfs, console log).
# Needs: qemu-system-x86, busybox-static, cpio, xz-utils (.ci/setup).
set -euo pipefail
build=$(cd "$1" && pwd)
pattern=$2
guest_script=$3
timeout_s=${4:-300}
here=$(cd "$(dirname "$0")" && pwd)
km=${QSCOPE_KM_DIR:-$build/kernel-matrix}
cache=$km/cache
mkdir -p "$cache"

die() { echo "vm.sh: $*" >&2; exit 1; }
for tool in qemu-system-x86_64 cpio gzip xz; do command -v $tool >/dev/null || die "$tool missing (run .ci/setup)"; done
[[ -x /bin/busybox ]] || die "/bin/busybox missing (busybox-static; run .ci/setup)"

# ---- the kernel: newest package matching the pattern, downloaded once ------------------
suite=
if [[ $pattern == *:* ]]; then suite=${pattern%%:*}; pattern=${pattern#*:}; fi
apt_opts=()
if [[ -n $suite ]]; then
  # Another release's lists, in a private apt state: the host's own is never touched.
  a=$cache/apt-$suite
  mkdir -p "$a/lists/partial" "$a/cache/archives/partial"
  printf 'deb http://deb.debian.org/debian %s main\ndeb http://deb.debian.org/debian-security %s-security main\n' \
    "$suite" "$suite" > "$a/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$a/sources.list" -o Dir::Etc::SourceParts=/dev/null
            -o "Dir::State::Lists=$a/lists" -o "Dir::Cache=$a/cache" -o Dir::State::Status=/dev/null)
  if [[ -z $(find "$a/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null) ]]; then
    apt-get "${apt_opts[@]}" update -qq >&2 || die "apt-get update for $suite failed"
  fi
fi
regex="^${pattern//\*/[^ ]*}\$"
regex=${regex//./\\.}
mapfile -t pkgs < <(apt-cache "${apt_opts[@]}" search --names-only "$regex" 2>/dev/null | awk '{print $1}' | sort -rV)
((${#pkgs[@]})) || die "no package matches $pattern in the apt lists${suite:+ of $suite} (apt-get update?)"
# A cached kernel is used as it is; else the newest that downloads.
pkg=
for p in "${pkgs[@]}"; do [[ -f $cache/$p/vmlinuz ]] && { pkg=$p; break; }; done
for p in "${pkgs[@]}"; do
  [[ -n $pkg ]] && break
  rm -rf "$cache/$p.tmp" && mkdir -p "$cache/$p.tmp"
  if (cd "$cache/$p.tmp" && apt-get "${apt_opts[@]}" download -q "$p" 2>&1 | grep -v unsandboxed >&2 || true
      ls "$cache/$p.tmp"/*.deb >/dev/null 2>&1); then
    pkg=$p
  else
    echo "vm.sh: $p did not download; trying an older one" >&2
    rm -rf "$cache/$p.tmp"
  fi
done
[[ -n $pkg ]] || die "none of ${pkgs[*]} downloaded"
kdir=$cache/$pkg
if [[ ! -f $kdir/vmlinuz ]]; then
  echo "vm.sh: fetched $pkg (once; cached in $cache)" >&2
  dpkg-deb -x "$kdir.tmp"/*.deb "$kdir.tmp/root"
  cp "$kdir.tmp"/root/boot/vmlinuz-* "$kdir.tmp/vmlinuz"
  cp "$kdir.tmp"/root/boot/config-* "$kdir.tmp/config"
  basename "$kdir.tmp"/root/boot/vmlinuz-* | sed 's/^vmlinuz-//' > "$kdir.tmp/release"
  # sock_diag for TCP and Unix sockets (the listeners' queues) is a module in Debian's
  # kernels: keep it. 6.1 ships them plain, 6.12 as .ko.xz (CONFIG_MODULE_COMPRESS_XZ), which
  # busybox's insmod cannot read: decompressed here (the signature sits inside, before xz).
  mkdir -p "$kdir.tmp/modules"
  for m in inet_diag tcp_diag unix_diag; do
    f=$(find "$kdir.tmp/root/lib/modules" -name "$m.ko*" | head -1)
    [[ -n $f ]] || continue
    case $f in
      *.ko.xz) xz -dc "$f" > "$kdir.tmp/modules/$m.ko" ;;
      *.ko.zst) zstd -qdc "$f" > "$kdir.tmp/modules/$m.ko" ;;
      *.ko) cp "$f" "$kdir.tmp/modules/" ;;
    esac
  done
  rm -rf "$kdir.tmp/root" "$kdir.tmp"/*.deb
  rm -rf "$kdir" && mv "$kdir.tmp" "$kdir"
fi
release=$(cat "$kdir/release")

# ---- the initramfs: rebuilt every run (the binaries change), ~1 s ------------------------
stage=$km/stage-$release
rm -rf "$stage"
mkdir -p "$stage"/{bin,sbin,proc,sys,dev,tmp,run,boot,etc,qscope}
cp /bin/busybox "$stage/bin/busybox"
bins=("$build/qscope")
for t in qs_server qs_load qs_downstream; do bins+=("$build/targets/$t"); done
# bpftool names the programs an exporter's links attach (smoke.sh `linked`).
bins+=("$(command -v bpftool || echo /usr/sbin/bpftool)")
for b in "${bins[@]}"; do
  [[ -x $b ]] || die "$b not built"
  cp "$b" "$stage/qscope/"
  # Every library the binaries load, at the same path (the dynamic loader included).
  ldd "$b" | grep -oE '/[^ ]+' | while read -r lib; do
    [[ -e $stage$lib ]] && continue
    mkdir -p "$stage$(dirname "$lib")"
    cp -L "$lib" "$stage$lib"
  done
done
# libbpf reads CONFIG_HZ (sock.bpf.c __kconfig) from /boot/config-$(uname -r).
cp "$kdir/config" "$stage/boot/config-$release"
mkdir -p "$stage/lib/qscope-modules"
cp "$kdir"/modules/* "$stage/lib/qscope-modules/" 2>/dev/null || true
cp "$here/guest-init.sh" "$stage/init"
cp "$guest_script" "$stage/qscope/guest.sh"
# The guest's settings (guest-init.sh and the script source /qscope/env): the socket cases'
# attach types, and the limit its watchdog reports stuck tasks before.
printf 'KM_MODES="%s"\nKM_TIMEOUT=%s\n' "${QSCOPE_KM_MODES:-}" "$timeout_s" > "$stage/qscope/env"
chmod +x "$stage/init" "$stage/qscope/guest.sh"
initrd=$km/initrd-$release.gz
(cd "$stage" && find . | cpio -o -H newc --quiet | gzip -1) > "$initrd"
rm -rf "$stage"

# ---- boot --------------------------------------------------------------------------------
log=$km/console-$release.log
echo "vm.sh: booting $pkg ($release) under QEMU TCG, timeout ${timeout_s}s; console in $log" >&2
start=$SECONDS
# Both vCPUs run in one host thread (thread=single): under multi-threaded TCG, Debian's 6.12
# oopses on an int3 left in kernel text by the static-key patching (text_poke_bp) racing the
# other vCPU: at boot (sched_clock_cpu) and mid-test (inet_ehashfn from connect(); CI, twice).
# A boot that dies before /init runs is still retried once.
for attempt in 1 2; do
  rc=0
  timeout --foreground -k 5 "$timeout_s" qemu-system-x86_64 -machine q35 -accel tcg,thread=single -cpu max -m 1024 -smp 2 \
    -nographic -no-reboot -kernel "$kdir/vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 quiet loglevel=3${QSCOPE_VM_LOCKDOWN:+ lockdown=$QSCOPE_VM_LOCKDOWN}" \
    </dev/null >"$log" 2>&1 || rc=$?
  grep -q "KM uname" "$log" && break
  echo "vm.sh: attempt $attempt: the kernel died before /init ran (console in $log.$attempt)" >&2
  cp "$log" "$log.$attempt"
done
echo "vm.sh: guest ran $((SECONDS - start)) s (qemu exit $rc)" >&2
tr -d '\r' <"$log"
[[ $rc -eq 0 ]] || die "qemu exited $rc (124: timed out)"
