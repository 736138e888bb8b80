#!/usr/bin/env bash
# Runs the whole test suite N times in a row (default 10) under `ctest -j2`, as CI's 2 cores would,
# and reports every test that failed in any run. A flaky test is a defect: use this before landing a
# change to the scheduler, the services or the tests. Logs: <build>/repeat/run-<k>.log.
#   scripts/repeat_tests.sh [N] [extra ctest arguments, e.g. -LE slow]
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${ASTR_BUILD_DIR:-$ROOT/build}"
N="${1:-10}"
shift || true
mkdir -p "$BUILD/repeat"
declare -A failed=()
for k in $(seq 1 "$N"); do
  log="$BUILD/repeat/run-$k.log"
  start=$(date +%s)
  ctest --test-dir "$BUILD" -j2 --output-on-failure "$@" > "$log" 2>&1
  rc=$?
  names=$(sed -n '/The following tests FAILED:/,$p' "$log" | grep -E '^\s+[0-9]+ - ' | sed -E 's/^\s+[0-9]+ - ([^ ]+).*/\1/')
  for t in $names; do failed[$t]=$(( ${failed[$t]:-0} + 1 )); done
  echo "run $k/$N: rc=$rc, $(( $(date +%s) - start )) s, failed: ${names:-none}" | tr '\n' ' '
  echo
done
if [ ${#failed[@]} -eq 0 ]; then
  echo "no failures in $N runs"
  exit 0
fi
echo "failures (test: runs failed of $N):"
for t in "${!failed[@]}"; do echo "  $t: ${failed[$t]}"; done
exit 1
