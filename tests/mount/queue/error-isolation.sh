#!/bin/bash
# One file's medium error stays that file's. File A's blocks go bad (slowdev
# `fail write` on exactly A's extents), so A's queued data fails for good and
# A's writer gets EIO. Then file B, bigger than the queue (queue=1M, B 6 MiB),
# is written to the good part of the medium: B's writes, fsync and close must
# all succeed while A's data still fails, and B's content must be on the
# medium. Errors are per file: a file whose data fails may hold part of the
# queue, not stop every other file's writes with its error.
#
# A is created and synced before the fault and then only overwritten (ext2
# keeps an overwrite in the same blocks; see eio.sh); its extents come from
# filefrag on the lower. B is created afterwards, in free space.
# usage: error-isolation.sh SLOWMEDIA QIO SLOWDEV
SLOWMEDIA=$1 QIO=$2 SLOWDEV=${3:-}
. "$(dirname "$0")/qlib.sh"
q_require_slowdev filefrag timeout
q_init

SD=qt-eiso-$$ LOWER=$Q_TMP/lower MNT=$Q_TMP/mnt
q_on_exit "slowdev_down $SD"
slowdev_up "$SD" 32 usbstick ext2 "$LOWER" || { echo "slowdev_up failed"; exit 1; }
LOOP=$(slowdev_loop "$SD")
q_start "$LOWER" "$MNT" queue=1M

ctl() {
	slowdev_ctl "$SD" "$1" || q_fail "slowdev ctl '$1' refused"
}

q_check "file A, allocated and synced" \
	"$QIO" create "$MNT/a.dat" write=ok 2M 41 fsync=ok close=ok
sync -f "$LOWER"

# A's extents in bytes of the medium ("start end" lines): filefrag prints
# them in filesystem blocks, "first..last" for physical_offset.
filefrag -v "$LOWER/a.dat" >"$Q_TMP/frag" 2>&1
bs=$(sed -n 's/.*blocks of \([0-9]*\) bytes.*/\1/p' "$Q_TMP/frag")
awk -v bs="$bs" -F: '$1 ~ /^ *[0-9]+$/ {
	split($3, p, /\.\./)
	printf "%d %d\n", p[1] * bs, (p[2] + 1) * bs
}' "$Q_TMP/frag" >"$Q_TMP/extents"
q_log "A's extents on the medium (bytes): $(tr '\n' ' ' <"$Q_TMP/extents")"
covered=$(awk '{s += $2 - $1} END {print s + 0}' "$Q_TMP/extents")
q_check "filefrag found A's blocks ($covered bytes)" [ "$covered" -ge $((2 << 20)) ]
[ "$covered" -ge $((2 << 20)) ] || { sed 's/^/  /' "$Q_TMP/frag"; q_finish; }
while read -r s e; do
	ctl "fail write $s $e"
done <"$Q_TMP/extents"

# A's overwrite fills the queue while the medium stalls (else its first
# chunk may fail before A holds the queue); then the chunks fail, and a later
# write, the fsync or the close reports EIO.
A_PID=""
kill_a() {
	[ -z "$A_PID" ] || kill -9 "$A_PID"
}
q_on_exit kill_a
ctl "stall 30"
"$QIO" open "$MNT/a.dat" write 2M 43 fsync close >"$Q_TMP/a.out" 2>&1 &
A_PID=$!
sleep 1
q_check "A's writer is still waiting while the medium stalls" kill -0 "$A_PID"
ctl "stall 0"
t0=$(q_now)
while kill -0 "$A_PID" 2>/dev/null && q_between "$(q_since "$t0")" 0 30; do
	sleep 0.1
done
if kill -0 "$A_PID" 2>/dev/null; then
	q_fail "A's writer still running 30 s after the stall"
else
	wait "$A_PID"
	A_PID=""
fi
out=$(cat "$Q_TMP/a.out")
echo "$out" | sed 's/^/  A: /'
q_log "A's writer had $(awk '$1 == "write" {sub("bytes=", "", $3); print $3}' <<<"$out") bytes acknowledged"
q_check "A's writer got EIO at a write, fsync or close" \
	grep -qE '^(write|fsync|close) rc=EIO' <<<"$out"
q_check "the medium refused A's blocks" [ "$(slowdev_stat "$SD" errors)" -gt 0 ]
q_check "A's data is still failing (fsync EIO)" \
	q_quiet timeout 30 "$QIO" open "$MNT/a.dat" fsync=EIO close=EIO

errs0=$(slowdev_stat "$SD" errors)
out=$(timeout 40 "$QIO" create "$MNT/b.dat" write=ok 6M 42 fsync=ok close=ok)
rc=$?
echo "$out" | sed 's/^/  B: /'
q_check "B (6 MiB, queue 1 MiB): every write, the fsync and the close succeed (rc $rc)" [ "$rc" = 0 ]
q_log "the medium refused $(($(slowdev_stat "$SD" errors) - errs0)) requests meanwhile"
q_check "A's data still fails afterwards: its fsync still EIO" \
	q_quiet timeout 30 "$QIO" open "$MNT/a.dat" fsync=EIO close=EIO
q_alive "$MNT"

# Let A's data go too, so the daemon can drain and exit as usual.
ctl clear
q_stop "$MNT" allow-errors
umount "$LOWER" && mount -t ext2 "$LOOP" "$LOWER"
q_check "B is on the medium, whole (after a remount)" "$QIO" verify=ok "$LOWER/b.dat" 6M 42
q_check "and no longer" [ "$(q_size "$LOWER/b.dat")" = $((6 << 20)) ]
q_finish
