#!/bin/sh
# The Go side of the fault suite (gokernel/segment fault_test.go and
# kill_test.go: a disk that fills up, failing store operations, SIGKILL
# during merges and commits), run verbosely so that its trial counts are
# printed; `make test` runs it after `go test -skip` of the same tests.
set -u
GO=${GO:-go}
out=$($GO test -count=1 -run '^(TestFault|TestKillDuring)' -v ./gokernel/segment/ 2>&1)
rc=$?
printf '%s\n' "$out" | grep -E 'trials|^(--- |ok |FAIL)'
if [ $rc -ne 0 ]; then
  printf '%s\n' "$out" | tail -60
fi
exit $rc
