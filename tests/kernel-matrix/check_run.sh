#!/bin/sh
# What `qscope check` says in the guest, and whether a short snapshot runs: under kernel
# lockdown (vm.sh boots with lockdown=integrity or =confidentiality), and on a kernel older than
# qscope's BPF needs (Debian 11's 5.10). -v: libbpf's own words for a refused load (the
# verifier's line) land in the stderr block. Ports 28300-28399.
PATH=/qscope:/bin:/sbin
echo "KM lockdown-file $(cat /sys/kernel/security/lockdown 2>/dev/null)"
qscope check > /tmp/c.txt 2>&1
echo "KM check-exit $?"
echo "KM-BEGIN check"; cat /tmp/c.txt; echo "KM-END check"
qs_server --port 28310 --workers 2 > /tmp/srv.out 2>&1 &
srv=$!
sleep 1
qscope snapshot --pid $srv --duration 1 --json -v > /tmp/s.json 2> /tmp/s.err
echo "KM snapshot-exit $?"
echo "KM-BEGIN snapshot"; cat /tmp/s.json; echo; echo "KM-END snapshot"
echo "KM-BEGIN stderr"; cat /tmp/s.err; echo "KM-END stderr"
kill $srv
echo "KM smoke-seconds done"
