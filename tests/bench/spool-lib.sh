# spool-lib.sh: what the spool benchmarks (spool-copy.sh, spool-replay.sh)
# share. Source it after parsing the options, with the script's original
# arguments: spool_bench_init "$0" "${orig_args[@]}". It checks for root and
# /dev/fuse (exit 77), builds when there is no build, re-runs the script in
# a private mount namespace, installs media.sh's traps and makes the work
# directory W (the medium's mount point W/mnt, the spool W/spool, 0700) and
# a source file of MB MiB of random bytes, W/src. A daemon whose pid is in
# $pid is killed and its mount detached on exit.
# shellcheck shell=bash

# At the top level: its arrays would be local to a function that sourced it.
# shellcheck source=../lib/media.sh
. "$top/tests/lib/media.sh"

spool_bench_init() {
	local script=$1
	shift
	[ "$(id -u)" = 0 ] || { echo "SKIP: root only"; exit 77; }
	[ -c /dev/fuse ] || { echo "SKIP: no /dev/fuse"; exit 77; }
	if [ ! -x "$slowmedia" ] || [ ! -x "$ctl" ]; then
		echo "# no build in $SLOWMEDIA_BUILD: building it first (tests/build.sh)"
		bash "$top/tests/build.sh" || exit 1
	fi
	if [ -z "${SPOOL_BENCH_NS:-}" ]; then
		SPOOL_BENCH_NS=1 exec unshare -m --propagation private bash "$script" "$@"
	fi
	media_install_traps
	export SLOWMEDIA_CTL_DIR=$MEDIA_STATE/ctl
	W=$MEDIA_STATE
	mkdir -p "$W/mnt" "$W/spool" "$W/rescue"
	chmod 700 "$W/spool"
	pid=
	media_on_exit daemon 'if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null; fi; umount -l "$W/mnt" 2>/dev/null; true'
	head -c $((mb << 20)) /dev/urandom >"$W/src"
}

is_mounted() { awk -v m="$1" '$2 == m {f = 1} END {exit !f}' /proc/mounts; }
now() { date +%s.%N; }
# median [min-max] of the numbers on stdin
med() { sort -g | awk '{a[NR] = $1} END {m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; printf "%.2f [%.2f-%.2f]", m, a[1], a[NR]}'; }

# fast_disk_mbps: the fast disk's own write throughput (dd of W/src to
# W/fastcopy with conv=fsync), MB/s.
fast_disk_mbps() {
	local t0 t1
	rm -f "$W/fastcopy"
	t0=$(now); dd if="$W/src" of="$W/fastcopy" bs=1M conv=fsync status=none; t1=$(now)
	rm -f "$W/fastcopy"
	echo "$mb / ($t1 - $t0)" | bc -l
}
