#!/bin/sh
# Kernel lockdown in the guest (booted with lockdown=integrity or =confidentiality by vm.sh):
# what `qscope check` says, and whether a short snapshot runs. Ports 28300-28399.
PATH=/qscope:/bin:/sbin
echo "KM lockdown-file $(cat /sys/kernel/security/lockdown)"
qscope check > /tmp/c.txt 2>&1
echo "KM check-exit $?"
echo "KM-BEGIN check"; cat /tmp/c.txt; echo "KM-END check"
qs_server --port 28310 --workers 2 > /tmp/srv.out 2>&1 &
srv=$!
sleep 1
qscope snapshot --pid $srv --duration 1 --json > /tmp/s.json 2> /tmp/s.err
echo "KM snapshot-exit $?"
echo "KM-BEGIN snapshot"; cat /tmp/s.json; echo; echo "KM-END snapshot"
echo "KM-BEGIN stderr"; cat /tmp/s.err; echo "KM-END stderr"
kill $srv
echo "KM smoke-seconds done"
