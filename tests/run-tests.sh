#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run unit then mount tests.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/tests/install-deps.sh"
bash "$top/tests/build.sh"
cd "$top"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
# The sanitized unit suite builds and runs beside the plain one (whose fuzzers
# keep one core busy at a time); its output follows the plain suite's.
san=$(mktemp)
trap 'rm -f "$log" "$san"' EXIT
bash "$top/tests/run-sanitizers.sh" >"$san" 2>&1 &
san_pid=$!
meson test -C build --print-errorlogs --suite unit 2>&1 | tee -a "$log" || rc=1
wait "$san_pid" || rc=1
echo "== the unit suite under ASan and UBSan (tests/run-sanitizers.sh)"
tee -a "$log" <"$san"
# Two at a time for the tests that allow it (is_parallel: they check results,
# not times); every other one runs alone.
meson test -C build --print-errorlogs --suite mount --num-processes 2 2>&1 | tee -a "$log" || rc=1
# One closing line over both suites (meson prints one per suite).
sum() { awk -v k="$1" '$1 == k":" {n += $2} END {print n + 0}' "$log"; }
echo "tests: $(sum Ok) passed, $(( $(sum Fail) + $(sum Timeout) )) failed, $(sum Skipped) skipped"
exit $rc
