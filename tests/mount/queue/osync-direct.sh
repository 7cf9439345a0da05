#!/bin/bash
# O_SYNC and O_DSYNC writes are durable when they return, with or without
# O_DIRECT. The lower is ext2 on a loop device and the flush rate is capped
# (rate=1M), so queued data would wait seconds for the flusher. For each of
# O_DIRECT|O_SYNC, O_DIRECT|O_DSYNC, O_SYNC and O_DSYNC (buffered), 3 MiB
# written in 1 MiB calls: after each call returns, the loop device has written
# at least the bytes written so far and an O_DIRECT read of the lower file gives
# them back (qio2's lower check); the whole write took about bytes / rate (it
# waited for the paced flush, rather than the daemon writing around the pacer).
# An O_DIRECT write without O_SYNC, for contrast, is only logged.
# usage: osync-direct.sh SLOWMEDIA QIO QIO2
SLOWMEDIA=$1 QIO=$2 QIO2=${3:-}
. "$(dirname "$0")/qlib.sh"
[ -x "$QIO2" ] || { echo "QIO2 '$QIO2' is not executable"; exit 1; }
# q2 STEP...: qio2, its report indented.
q2() {
	"$QIO2" "$@" | sed 's/^/  /'
	return "${PIPESTATUS[0]}"
}
q_setup_ext2 64
q_start "$LOWER" "$MNT" rate=1M

SIZE=$((3 << 20))
RATE=$((1 << 20))

# sync_write NAME FLAGS SEED: the write, checked by qio2 against the lower.
sync_write() {
	local name=$1 flags=$2 seed=$3 out rc secs
	out=$("$QIO2" open "$MNT/$name" "wronly,creat,trunc,$flags" lower "$LOWER/$name" "$Q_LOOP" \
		bs 1M pwrite=ok 0 $SIZE "$seed" close=ok)
	rc=$?
	echo "$out" | sed 's/^/  /'
	q_check "$flags: each 1 MiB write is on the medium when it returns" [ $rc = 0 ]
	secs=$(echo "$out" | awk '$1 == "pwrite" {sub("secs=", "", $4); print $4}')
	# The pacer may let the first chunk go at once: at least 2/3 of bytes / rate.
	q_check "$flags: the write waited for the paced flush (${secs:-?} s, bytes / rate = 3 s)" \
		q_between "${secs:-0}" 1.9 20
	q_check "$flags: the lower file is complete" q2 verify "$LOWER/$name" 0 $SIZE "$seed" 0
}

out=$("$QIO2" open "$MNT/plain" wronly,creat,trunc,direct bs 1M pwrite=ok 0 $SIZE 30 close=ok)
q_check "an O_DIRECT write without O_SYNC" [ $? = 0 ]
q_log "without O_SYNC: $(echo "$out" | grep ^pwrite); lower size then $(q_size "$LOWER/plain")"
q_check "its data reaches the lower file by fsync" "$QIO" open "$MNT/plain" fsync=ok close=ok
q_log "rate=$RATE bytes/s, $SIZE bytes per file"

sync_write dsync-buffered dsync 31
sync_write sync-buffered sync 32
sync_write sync-direct direct,sync 33
sync_write dsync-direct direct,dsync 34

q_alive "$MNT"
q_stop "$MNT"
for f in sync-buffered:32 dsync-buffered:31 sync-direct:33 dsync-direct:34 plain:30; do
	q_check "${f%:*} is complete after the unmount" \
		q2 verify "$LOWER/${f%:*}" 0 $SIZE "${f#*:}" 0
done
q_finish
