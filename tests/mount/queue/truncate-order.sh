#!/bin/bash
# Truncates through the queue: what ftruncate returns is what happens, and a
# read while a queued truncate is applied sees the truncated file.
# The medium: ext2 on slowdev (tests/slowdev/slowdev-media.sh), as in eio.sh.
#
# (a) A file with a sticky write error (slowdev `fail write` while its
# overwrite is queued): ftruncate through the mount either fails, and then the
# truncate never happens (the size through the mount, then on the lower once
# the fault is cleared and the queue drained, is the old one), or returns 0
# and is applied. Either way the bytes are the ones acknowledged.
#
# (b) A file with old data on the lower, then through the mount: a 4K write
# at 0, ftruncate(FLOOR), ftruncate(256K), all queued; another thread reads
# [0, 256K) through O_DIRECT, again and again, while the flusher applies the
# truncates: it must read the write's head below FLOOR and zeros above, never
# old bytes. Meanwhile a third thread keeps an O_DIRECT read of the lower file
# in flight (ext2 holds the inode lock across it, the medium takes 20 ms a
# seek), so the flusher's lower ftruncate waits before it cuts the size, and
# the old bytes stay readable from the page cache: the window is wide, and on
# a daemon that stops hiding them before the lower ftruncate is done, a
# third of the rounds read old bytes. Rounds alternate with FLOOR 0, for
# RACE_SECS (15) seconds. qio2's race step.
# usage: truncate-order.sh SLOWMEDIA QIO QIO2 SLOWDEV
SLOWMEDIA=$1 QIO=$2 QIO2=${3:-} SLOWDEV=${4:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev
[ -x "$QIO2" ] || { echo "QIO2 '$QIO2' is not executable"; exit 1; }
q_init

SD=qt-trunc-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
RACE_SECS=${RACE_SECS:-15}
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 32 dvdram ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"
q_start "$LOWER" "$MNT" read_grace=0

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

# q2 STEP...: qio2, its report indented.
q2() {
	"$QIO2" "$@" | sed 's/^/  /'
	return "${PIPESTATUS[0]}"
}

# expect_file PATH SIZE: 64 KiB of seed 21, then seed 19, SIZE bytes in all.
expect_file() {
	[ "$(q_size "$1")" = "$2" ] && q2 verify "$1" 0 64K 21 0 &&
		q2 verify "$1" 64K $(($2 - 65536)) 19 64K
}

# (a)
NAME=trunc-victim.dat OLD=$((256 << 10)) NEW=$((100 << 10))
q_check "the victim file, allocated and synced" \
	"$QIO" create "$MNT/$NAME" write=ok 256K 19 fsync=ok close=ok
sync -f "$LOWER"
ctl "fail write 0 32M"
out=$("$QIO2" open "$MNT/$NAME" rdwr pwrite=ok 0 64K 21 sleep 1500 fsync=EIO ftruncate $NEW close)
rc=$?
echo "$out" | sed 's/^/  /'
q_check "the overwrite is queued and then fails (fsync: EIO)" [ $rc = 0 ]
trc=$(echo "$out" | awk '$1 == "ftruncate" {sub("rc=", "", $2); print $2}')
if [ "$trc" = ok ]; then
	WANT=$NEW
	q_log "ftruncate to $NEW returned 0: it must be applied"
else
	WANT=$OLD
	q_log "ftruncate to $NEW returned ${trc:-?}: it must never be applied"
fi
sleep 1.2 # the kernel's attributes time out
q_check "through the mount the file is $WANT bytes, as acknowledged" expect_file "$MNT/$NAME" $WANT

ctl clear
ok=0
for ((i = 0; i < 60; i++)); do
	if "$QIO" open "$MNT/$NAME" fsync=ok close=ok >/dev/null; then
		ok=1
		break
	fi
	sleep 0.25
done
q_check "after the fault is cleared fsync returns 0" [ $ok = 1 ]
q_check "the lower file is $WANT bytes, as acknowledged (it is $(q_size "$LOWER/$NAME"))" \
	expect_file "$LOWER/$NAME" $WANT
sleep 1.2
q_check "and through the mount still" expect_file "$MNT/$NAME" $WANT

# (b)
ctl "set write_bw=20M read_bw=20M seek_ms=20"
ctl "fast off"
out=$("$QIO2" open "$MNT/race" rdwr,creat race=ok "$LOWER/race" "$RACE_SECS" 256K 2148)
rc=$?
echo "$out" | grep -v "^qio2: race: floor" | sed 's/^/  /'
echo "$out" | grep "^qio2: race: floor" | head -5 | sed 's/^/  /'
q_check "reads while queued truncates are applied never see old bytes" [ $rc = 0 ]
# A daemon may apply truncates at once (then there is no race to see): say so.
if [ "$(echo "$out" | sed -n 's/.* \([0-9]*\) with the truncate queued.*/\1/p')" = 0 ]; then
	q_log "no round had its truncates queued: the race was not exercised"
fi
ctl "fast on"

q_alive "$MNT"
q_stop "$MNT" allow-errors
q_check "after the daemon's exit the lower file is still $WANT bytes" expect_file "$LOWER/$NAME" $WANT
q_finish
