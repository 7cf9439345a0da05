#!/usr/bin/env bash
# Bad options: every problem is named on stderr at once, the exit status is
# non-zero and nothing is mounted. Good spellings and fstab-only keys mount.
#   test-bad-options.sh SLOWMEDIA
ML_DAEMON=$1
EXIT_WAIT_S=5
source "${MOUNT_LIB:-$(dirname "$0")/../lib/mount-lib.sh}"

ml_require_root_fuse
ml_init
src=$ML_TMP/src
mnt=$ML_TMP/mnt
mkdir -m 755 "$src" "$mnt"
: >"$ML_TMP/a-file"

# rejected DESC NEEDLE... -- ARGS...: the daemon must exit non-zero without
# mounting, and its stderr must name every NEEDLE.
rejected() {
	local desc=$1 needles=() out=$ML_TMP/out pid i rc
	shift
	while [ "$1" != -- ]; do
		needles+=("$1")
		shift
	done
	shift
	"$ML_DAEMON" "$@" -f >"$out" 2>&1 </dev/null &
	pid=$!
	for ((i = 0; i < EXIT_WAIT_S * 20; i++)); do
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 $pid 2>/dev/null; then
		ml_fail "$desc: daemon still running after ${EXIT_WAIT_S}s"
		ml_is_mounted "$mnt" && umount -l "$mnt"
		kill $pid
	fi
	rc=0
	wait $pid || rc=$?
	ml_check "$desc: exit status non-zero ($rc)" test "$rc" != 0
	ml_check "$desc: nothing mounted" ml_not ml_is_mounted "$mnt"
	for n in "${needles[@]}"; do
		grep -qF -- "$n" "$out" || ml_fail "$desc: stderr does not name '$n'"
	done
	sed 's/^/  | /' "$out"
}

rejected "many bad options at once" \
	prio=9 class=fast weight=0 rate=abc queue=1 latency=0 flushers=0 \
	read_grace=-1 frobnicate sync_close spool=relative arbiter=relative \
	'group=bad/name' spool_max=1x -- \
	"$src" "$mnt" -o 'prio=9,class=fast,weight=0,rate=abc,queue=1,latency=0,flushers=0' \
	-o 'read_grace=-1,frobnicate,sync_close=1,spool=relative,arbiter=relative' \
	-o 'group=bad/name,spool_max=1x'
rejected "options with missing values" prio weight queue fstype -- \
	"$src" "$mnt" -o prio=,weight,queue=,fstype=
rejected "spool_max without spool" spool_max -- "$src" "$mnt" -o spool_max=1G
rejected "bad paths and a bad option together" /nonexistent-src "$ML_TMP/a-file" \
	prio=8 -- /nonexistent-src "$ML_TMP/a-file" -o prio=8
rejected "SOURCE is a file" "$ML_TMP/a-file" -- "$ML_TMP/a-file" "$mnt"
rejected "fstype= with a directory SOURCE" fstype=ext4 -- "$src" "$mnt" -o fstype=ext4
rejected "missing MOUNTPOINT" MOUNTPOINT -- "$src"
rejected "missing both" SOURCE --
rejected "extra argument" extra -- "$src" "$mnt" extra
rejected "spool is not a directory" "$ML_TMP/a-file" -- "$src" "$mnt" -o "spool=$ML_TMP/a-file"
# libfuse checks its own numbers and the mount point one at a time, and used to
# stop the run at its first problem before ours were printed.
rejected "libfuse's numbers and ours together" prio=8 max_threads=abc \
	max_idle_threads=x max_read=-1 blksize=1000 queue=0 -- \
	"$src" "$mnt" -o prio=8,max_threads=abc,max_idle_threads=x,max_read=-1,blksize=1000,queue=0
rejected "no such SOURCE, no such MOUNTPOINT and queue=0" \
	"$ML_TMP/no-src" "$ML_TMP/no-mnt" queue=0 -- "$ML_TMP/no-src" "$ML_TMP/no-mnt" -o queue=0
ml_check "no 'fuse:' line of libfuse's cut the list short" ml_not grep -q "^fuse:" "$ML_TMP/out"
rejected "an empty fstype=" fstype -- "$src" "$mnt" -o fstype=
ml_check "an empty fstype= is reported once" test "$(grep -c fstype "$ML_TMP/out")" = 1
# queue= is memory: above half of MemAvailable it is refused, naming the limit.
big_queue=$(awk '$1 == "MemAvailable:" {printf "%dM", $2 / 1024 * 3 / 4}' /proc/meminfo)
[ "$big_queue" = 0M ] || rejected "queue= above half of MemAvailable" \
	"queue=$big_queue" "MemAvailable" "at most queue=" -- "$src" "$mnt" -o "queue=$big_queue"
rejected "queue=64G on this machine" queue=64G -- "$src" "$mnt" -o queue=64G

# Good values at their bounds, and fstab-only keys, mount.
good() { # DESC OPTS
	ml_try_start "$src" "$mnt" -o "$2" || { ml_fail "$1: did not mount"; return; }
	echo "ok - $1: mounted"
	ml_stop "$mnt"
}
good "options at their bounds" \
	prio=0,class=idle,weight=1,rate=64KiB,queue=8M,latency=1,read_grace=0,flushers=4,sync_close,arbiter=off
good "more bounds" prio=7,class=be,group=usb-bus.1:a_b,rate=1G,latency=1000,arbiter=auto
good "fstab-only keys are dropped" \
	auto,noauto,nofail,_netdev,user,users,defaults,x-systemd.automount,x-foo=bar,comment=x
good "fstab's bare 'group' key (see options.c fstab_keys) is dropped" group,nofail

# Options that do nothing (the arbiter's with arbiter=off) say so at
# start-up, each named, without the word "error" (ml_stop fails on it); the
# spool's work now and say nothing of the kind. The spool lives on a tmpfs:
# a spool on the medium (here, the source's filesystem) is refused.
ml_tmpfs "$ML_TMP/spool"
chmod 700 "$ML_TMP/spool"
if ml_try_start "$src" "$mnt" -o \
	"spool=$ML_TMP/spool,spool_max=1G,prio=2,class=idle,weight=5,group=g1,arbiter=off,queue=8M"; then
	for opt in prio=2 class=idle weight=5 group=g1; do
		grep -qF -- "slowmedia: warning: $opt has no effect with arbiter=off" "${ML_LOGS[$mnt]}" ||
			ml_fail "no start-up warning for $opt with arbiter=off"
	done
	ml_check "no 'no effect' warning for the spool's options" \
		ml_not grep -q "spool.*no effect" "${ML_LOGS[$mnt]}"
	ml_check "no warning for queue=, which works" ml_not grep -q "queue=8M" "${ML_LOGS[$mnt]}"
	sed 's/^/  | /' "${ML_LOGS[$mnt]}"
	ml_stop "$mnt"
else
	ml_fail "spool=, prio= ... did not mount"
fi
ml_finish
