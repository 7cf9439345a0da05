#!/usr/bin/env bash
# The suites under sanitizers and valgrind, each a subset (the full set would
# not fit the CI's 15 minutes on 2 cores):
#
#   asan-unit   (default) ./build-san (-Db_sanitize=address,undefined, -O1):
#               every unit test but the fuzzers (they run sanitized in the
#               plain build already: tests/fuzz/README.md)
#   asan-mount  ./build-san: a representative part of the mount suite with
#               the ASan+UBSan daemon (ASAN_MOUNT_TESTS below: the POSIX
#               parity cases, the queue's writers, errors, EFBIG)
#   tsan-unit   ./build-tsan (-Db_sanitize=thread, -O1): the same unit tests
#   tsan-mount  ./build-tsan: queue-writers (six writers, flushers=4)
#               on the ThreadSanitizer daemon
#   valgrind-unit  ./build (the plain build) under valgrind memcheck: the
#               unit tests but the shell-driven spool-cli; leaks (definite,
#               indirect) count as errors
#   late        tsan-unit, valgrind-unit, tsan-mount, asan-mount, in turn
#               (tests/run-tests.sh runs it, niced, beside the mount suite)
#
# Any report fails the test that printed it: ASan aborts, UBSan halts on the
# first error, TSan exits 66 (in a mount test, a report in the daemon's
# output fails the test: tests/lib/mount-lib.sh, ml_reap). Slow builds divide
# the random unit tests' iteration counts by SLOWMEDIA_TEST_SLOWDOWN.
# glib's slice allocator hands blocks between threads in ways TSan and
# valgrind cannot follow: G_SLICE=always-malloc for all of them.
#
# usage: run-sanitizers.sh [MODE] [meson test args (a test name, say)]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

ASAN_MOUNT_TESTS=(parity queue-writers queue-eio queue-efbig queue-read-your-writes
	queue-error-isolation ctl-errors)
TSAN_MOUNT_TESTS=(queue-writers)

mode=asan-unit
case "${1:-}" in
asan-unit | asan-mount | tsan-unit | tsan-mount | valgrind-unit | late) mode=$1 && shift ;;
esac

export G_SLICE=always-malloc
export ASAN_OPTIONS=abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
# A mount test's daemon goes on after a report (the test reads it in the log).
export TSAN_OPTIONS=halt_on_error=0:exitcode=66:second_deadlock_stack=1

# build DIR [meson setup args...]: configure once, build; compiler errors shown.
# No -Werror here: the plain build (tests/build.sh) holds the code to it, and
# GCC's flow warnings at -O1 with sanitizers are noisier than at -O2.
build() {
	local dir=$1 out
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		meson setup "$dir" -Db_lundef=false -Doptimization=1 -Dwerror=false \
			-Dbench=false "$@" >/dev/null
	fi
	# ninja prints compiler errors on stdout: keep them when the build fails.
	if ! out=$(ninja -C "$dir" 2>&1); then
		printf '%s\n' "$out" >&2
		echo "run-sanitizers: the build in $dir failed" >&2
		return 1
	fi
}

unit() { # DIR [meson test args]
	local dir=$1
	shift
	meson test -C "$dir" --print-errorlogs --suite unit --no-suite fuzz "$@"
}

run() {
	case "$1" in
	asan-unit)
		echo "== the unit suite under ASan and UBSan (build-san)"
		build build-san -Db_sanitize=address,undefined
		unit build-san "${@:2}"
		;;
	asan-mount)
		echo "== part of the mount suite, ASan+UBSan daemon (build-san): ${ASAN_MOUNT_TESTS[*]}"
		build build-san -Db_sanitize=address,undefined
		FSX_OPS=${FSX_OPS:-1000} meson test -C build-san --print-errorlogs \
			--timeout-multiplier 3 "${ASAN_MOUNT_TESTS[@]}" "${@:2}"
		;;
	tsan-unit)
		echo "== the unit suite under TSan (build-tsan)"
		build build-tsan -Db_sanitize=thread
		TSAN_OPTIONS=halt_on_error=1:exitcode=66 SLOWMEDIA_TEST_SLOWDOWN=10 \
			unit build-tsan --timeout-multiplier 3 "${@:2}"
		;;
	tsan-mount)
		echo "== TSan daemon, several writers, flushers=4 (build-tsan): ${TSAN_MOUNT_TESTS[*]}"
		build build-tsan -Db_sanitize=thread
		FSX_OPS=${FSX_OPS:-1000} meson test -C build-tsan --print-errorlogs \
			--timeout-multiplier 3 "${TSAN_MOUNT_TESTS[@]}" "${@:2}"
		;;
	valgrind-unit)
		echo "== the unit suite under valgrind memcheck (build)"
		# No rebuild: in CI the mount suite runs from ./build meanwhile.
		[ -f build/build.ninja ] || bash tests/build.sh
		# One process per test binary (CK_FORK=no): the leak check sees it all.
		CK_FORK=no SLOWMEDIA_TEST_SLOWDOWN=10 unit build --no-rebuild --no-suite spool \
			--timeout-multiplier 5 --wrapper "valgrind -q --error-exitcode=99 \
--leak-check=full --errors-for-leak-kinds=definite,indirect \
--show-leak-kinds=definite,indirect" "${@:2}"
		;;
	late)
		local rc=0 m
		for m in tsan-unit valgrind-unit tsan-mount asan-mount; do
			run "$m" "${@:2}" || rc=1
		done
		return $rc
		;;
	esac
}

run "$mode" "$@"
