#!/bin/sh
# run-fuzz.sh TARGET SECONDS SRCDIR OUTDIR DRIVER CLANG PKGS SOURCE...
#
# Fuzzes TARGET (tests/fuzz/fuzz_TARGET.c) for SECONDS: with libFuzzer when
# CLANG (a path; empty: none) builds it with -fsanitize=fuzzer,address,undefined
# from SOURCE... (the target and the project files it needs; PKGS: pkg-config
# packages for their flags), else with DRIVER, the random driver the project's
# compiler built (fuzz_driver.c). Either way the corpus is
# tests/fuzz/corpus/TARGET, the reproducers in tests/fuzz/crashes/TARGET/ run
# first, and what fails is saved under OUTDIR/artifacts-TARGET/.
#
# Environment: FUZZ_TIME=S overrides SECONDS; FUZZ_ENGINE=driver skips
# libFuzzer; FUZZ_ARGS adds libFuzzer arguments (e.g. -jobs=2 -workers=2).
set -u
target=$1 seconds=$2 src=$3 out=$4 driver=$5 clang=$6 pkgs=$7
shift 7
seconds=${FUZZ_TIME:-$seconds}
corpus=$src/tests/fuzz/corpus/$target
crashes=$src/tests/fuzz/crashes/$target
dict=$src/tests/fuzz/$target.dict
art=$out/artifacts-$target/
mkdir -p "$art" "$out/corpus-$target"

reproducers=
if [ -d "$crashes" ]; then
	reproducers=$(find "$crashes" -type f | sort)
fi

run_driver() {
	echo "fuzz $target: the random driver, $seconds s"
	# shellcheck disable=SC2086 # reproducers: one path a word
	exec "$driver" -t "$seconds" -a "$art" "$corpus" $reproducers
}

[ "${FUZZ_ENGINE:-}" = driver ] && run_driver
if [ -z "$clang" ] || [ ! -x "$clang" ]; then
	run_driver
fi

bin=$out/libfuzzer-$target
buildlog=$out/libfuzzer-$target.build.log
# shellcheck disable=SC2086 # pkg-config's flags: words
if ! flags=$(pkg-config --cflags $pkgs) || ! libs=$(pkg-config --libs $pkgs) ||
	! "$clang" -std=gnu11 -g -O1 -fsanitize=fuzzer,address,undefined \
		-fno-sanitize-recover=undefined -D_GNU_SOURCE -DFUSE_USE_VERSION=314 \
		-I"$src/sched" -I"$src/fusefs" -I"$src/tests/fuzz" $flags "$@" $libs \
		-o "$bin" >"$buildlog" 2>&1; then
	echo "fuzz $target: $clang cannot build the libFuzzer target (see below); the random driver instead"
	tail -n 20 "$buildlog"
	run_driver
fi

log=$out/libfuzzer-$target.log
if [ -n "$reproducers" ]; then
	echo "fuzz $target: the reproducers in $crashes"
	# shellcheck disable=SC2086
	if ! "$bin" -error_exitcode=1 $reproducers >"$log" 2>&1; then
		tail -n 60 "$log"
		echo "fuzz $target: FAIL: a reproducer fails again"
		exit 1
	fi
fi
echo "fuzz $target: libFuzzer, $seconds s (new inputs go to $out/corpus-$target)"
# Exit codes: libFuzzer's default for a crash is 77, which meson reads as a skip.
# shellcheck disable=SC2086 # FUZZ_ARGS: words
"$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=8192 \
	-error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 \
	-dict="$dict" -artifact_prefix="$art" ${FUZZ_ARGS:-} \
	"$out/corpus-$target" "$corpus" >"$log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then
	tail -n 80 "$log"
	echo "fuzz $target: FAIL (exit $rc); the input is in $art, the whole log in $log"
	exit 1
fi
grep -E '^(Done|stat::)' "$log"
echo "fuzz $target: ok"
