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
late=$(mktemp)
trap 'rm -f "$log" "$san" "$late"' EXIT
bash "$top/tests/run-sanitizers.sh" asan-unit >"$san" 2>&1 &
san_pid=$!
meson test -C build --print-errorlogs --suite unit 2>&1 | tee -a "$log" || rc=1
wait "$san_pid" || rc=1
tee -a "$log" <"$san"
# The emulator's own model checks (slowdev-timing: its latencies within 5 %
# of the model) first, with nothing else running: a compile beside them,
# even niced, made a read 18 % late.
meson test -C build --print-errorlogs --suite slowdev-timing 2>&1 | tee -a "$log" || rc=1
# The other sanitizer runs (tests/run-sanitizers.sh late: the unit suite
# under TSan and under valgrind, queue-writers on a TSan
# daemon with flushers=4, a part of the mount suite on an ASan+UBSan daemon)
# go beside the mount suite, niced: most mount tests time a slow medium and
# leave a core idle. Their output follows the mount suite's.
nice -n 19 bash "$top/tests/run-sanitizers.sh" late >"$late" 2>&1 &
late_pid=$!
# Two at a time for the tests that allow it (is_parallel: they check results,
# not times); every other one runs alone.
meson test -C build --print-errorlogs --suite mount --no-suite slowdev-timing \
	--num-processes 2 2>&1 | tee -a "$log" || rc=1
wait "$late_pid" || rc=1
tee -a "$log" <"$late"
bash "$top/tests/mount/queue/faults-table.sh" build/meson-logs/testlog.txt
# One closing line over all suites (meson prints one per run).
sum() { awk -v k="$1" '$1 == k":" {n += $2} END {print n + 0}' "$log"; }
echo "tests: $(sum Ok) passed, $(( $(sum Fail) + $(sum Timeout) )) failed, $(sum Skipped) skipped"
exit $rc
