#!/bin/sh
# Runs inside the rxe VM: every test binary in /opt/gorun, against rxe0.
echo "rxe-vm: rxe0 up, RXE_VM_IP=$RXE_VM_IP, $(cut -d' ' -f1 /proc/uptime)s after boot"
export GORUN_RXE_VM=1
[ "$GORUN_TEST_BENCH" = 1 ] && export GORUN_VERBS_BW=1
rc=0
for t in /opt/gorun/*.test; do
  name=$(basename "$t")
  set -- -test.timeout="$GORUN_TEST_TIMEOUT" -test.count=1
  [ "$GORUN_TEST_SHORT" = 1 ] && set -- "$@" -test.short
  [ -n "$GORUN_TEST_V" ] && set -- "$@" -test.v
  if [ "$name" = comm.test ]; then
    # comm's own tests, every rank over rxe0
    set -- "$@" -test.run "$GORUN_COMM_RUN"
    s=$(cut -d' ' -f1 /proc/uptime)
    echo "=== $name GORUN_TRANSPORT=verbs $*"
    GORUN_TRANSPORT=verbs "$t" "$@"
    r=$?
  else
    [ -n "$GORUN_TEST_RUN" ] && set -- "$@" -test.run "$GORUN_TEST_RUN"
    s=$(cut -d' ' -f1 /proc/uptime)
    echo "=== $name $*"
    "$t" "$@"
    r=$?
  fi
  echo "=== $name exit=$r ($(awk -v a="$s" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN{printf "%.1f", b-a}')s)"
  [ $r = 0 ] || rc=1
done
exit $rc
