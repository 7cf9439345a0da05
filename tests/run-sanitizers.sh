#!/usr/bin/env bash
# The unit suite under AddressSanitizer and UndefinedBehaviorSanitizer: a
# second build in ./build-san (-Db_sanitize=address,undefined, -O1), every
# unit test but the fuzzers (they run sanitized in the plain build already:
# tests/fuzz/README.md). Any report fails the test that printed it (ASan
# aborts; UBSan halts on the first error). tests/run-tests.sh runs this beside
# the plain unit suite. Extra args go to meson test (a test name, say).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# No -Werror here: the plain build (tests/build.sh) holds the code to it, and
# GCC's flow warnings at -O1 with sanitizers are noisier than at -O2.
if [ ! -f build-san/build.ninja ]; then
	meson setup build-san -Db_sanitize=address,undefined -Db_lundef=false \
		-Doptimization=1 -Dwerror=false >/dev/null
fi
# ninja prints compiler errors on stdout: keep them when the build fails.
if ! out=$(ninja -C build-san 2>&1); then
	printf '%s\n' "$out" >&2
	echo "run-sanitizers: the sanitized build failed" >&2
	exit 1
fi
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
exec meson test -C build-san --print-errorlogs --suite unit --no-suite fuzz "$@"
