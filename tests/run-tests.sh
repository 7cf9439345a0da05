#!/usr/bin/env bash
# The whole test suite: install what is missing, build, run unit then mount tests.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
bash "$top/tests/install-deps.sh"
bash "$top/tests/build.sh"
cd "$top"
rc=0
meson test -C build --print-errorlogs --suite unit || rc=$?
meson test -C build --print-errorlogs --suite mount --num-processes 1 || rc=$?
exit $rc
