#!/bin/sh
# Runs every Go fuzz target of the kernel for FUZZTIME each.
#
# Go 1.26's fuzz coordinator can fail a target with a bare "context
# deadline exceeded" when a duration -fuzztime expires while a worker is
# mid-call (golang/go#75804, fixed in Go 1.27), without having found
# anything. Such a run counts as a pass; a written failing input, a panic
# or a test failure line still fails.
set -u
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-30s}
status=0
for pkg in $($GO list ./gokernel/...); do
  for t in $($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz'); do
    out=$($GO test -run '^$' -fuzz "^$t\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1)
    rc=$?
    if [ $rc -eq 0 ]; then
      echo "ok   $t ($pkg)"
    elif printf '%s\n' "$out" | grep -q 'context deadline exceeded' &&
      ! printf '%s\n' "$out" | grep -qE 'Failing input written|panic:|\.go:[0-9]+: '; then
      echo "ok   $t ($pkg): the fuzztime deadline race of Go 1.26 (golang/go#75804); nothing found"
    else
      printf '%s\n' "$out"
      echo "FAIL $t ($pkg)"
      status=1
    fi
  done
done
exit $status
