#!/bin/bash
# Sticky EIO from an injected medium error. The medium (slowdev_up, from
# tests/slowdev/slowdev-media.sh): ext2 on a loop device
# over slowdev's disk file; `fail write` in slowdev's ctl makes the medium's
# writes fail with EIO. A write queued while the fault holds fails in the
# flusher; the next write, fsync and close on that file return EIO and the
# daemon's log names the file. Once the fault is cleared the flusher's retry
# succeeds, fsync returns 0 again and the data is on the medium.
#
# The victim file is created and synced before the fault, and then only
# overwritten: ext2 allocates blocks at write time, and a bitmap or directory
# block whose writeback failed is never written again (the kernel drops the
# dirty state), which would lose the file on the medium whatever slowmedia does.
# usage: eio.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev
q_init

SD=qt-eio-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
NAME=eio-victim.dat
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 16 dvdram ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
slowdev_ctl "$SD" "fast on"
LOOP=$(slowdev_loop "$SD")
q_start "$LOWER" "$MNT"

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

# A first file proves the medium works before the fault.
q_check "a clean write and fsync" "$QIO" create "$MNT/before" write=ok 128K 20 fsync=ok close=ok

q_check "the victim file, allocated and synced" \
	"$QIO" create "$MNT/$NAME" write=ok 256K 19 fsync=ok close=ok
sync -f "$LOWER"

ctl "fail write 0 $((16 << 20))"
# The overwrite (one write call) is queued and acknowledged; its flush fails
# on the medium. The file is then 64 KiB of seed 21 and 192 KiB of seed 19.
out=$("$QIO" open "$MNT/$NAME" write=ok 64K 21 sleep 1500 \
	write=EIO 64K 21 fsync=EIO close=EIO)
rc=$?
echo "$out" | sed 's/^/  /'
q_check "queued write ok; then write, fsync and close return EIO" [ $rc = 0 ]
q_check "a new descriptor's fsync returns EIO too" "$QIO" open "$MNT/$NAME" fsync=EIO close=EIO
q_check "the daemon log names the file" grep -q "$LOWER/$NAME" "$Q_LOG"
grep "$NAME" "$Q_LOG" | head -3 | sed 's/^/  | /'
q_check "the other file is unaffected" "$QIO" open "$MNT/before" fsync=ok close=ok
q_alive "$MNT"

ctl clear
t0=$(q_now)
ok=0
for ((i = 0; i < 60; i++)); do
	if "$QIO" open "$MNT/$NAME" fsync=ok close=ok >/dev/null; then
		ok=1
		break
	fi
	sleep 0.25
done
q_log "fsync returned 0 again $(q_since "$t0") s after the fault was cleared"
q_check "after the fault is cleared the retry succeeds (fsync returns 0)" [ $ok = 1 ]
"$QIO" gen "$Q_TMP/expect" 256K 19 gen "$Q_TMP/s21" 320K 21 >/dev/null
dd if="$Q_TMP/s21" of="$Q_TMP/expect" bs=64K count=1 conv=notrunc status=none
q_check "the lower file holds the acknowledged overwrite, nothing more" \
	cmp "$Q_TMP/expect" "$LOWER/$NAME"
q_check "writes to the file succeed again" \
	"$QIO" append "$MNT/$NAME" write=ok 64K 21 fsync=ok close=ok
dd if="$Q_TMP/s21" of="$Q_TMP/expect" bs=64K skip=4 seek=4 count=1 conv=notrunc status=none
q_check "the daemon logged the recovery" grep -q "$NAME: writes succeed again" "$Q_LOG"

q_alive "$MNT"
q_stop "$MNT" allow-errors
# Remount the medium so the check reads it, not the page cache.
umount "$LOWER" && mount -t ext2 "$LOOP" "$LOWER"
q_check "on the medium after a remount" cmp "$Q_TMP/expect" "$LOWER/$NAME"
q_check "the first file too" "$QIO" verify=ok "$LOWER/before" 128K 20
q_finish
