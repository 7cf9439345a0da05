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
meson test -C build --print-errorlogs --suite unit 2>&1 | tee -a "$log" || rc=1
meson test -C build --print-errorlogs --suite mount --num-processes 1 2>&1 | tee -a "$log" || rc=1
# One closing line over both suites (meson prints one per suite).
sum() { awk -v k="$1" '$1 == k":" {n += $2} END {print n + 0}' "$log"; }
echo "tests: $(sum Ok) passed, $(( $(sum Fail) + $(sum Timeout) )) failed, $(sum Skipped) skipped"
exit $rc
