#!/bin/bash
# Drain on exit: with rate=2M, 6 MiB written and closed; a plain umount is
# refused (busy) while that is queued, a lazy one detaches, and the daemon
# exits only once every byte is in the lower file, about 3 s later (not at
# once, with data lost). The same with SIGTERM instead of
# umount: the mount goes away and the queue still drains before the exit.
# usage: drain.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs

# drain_case HOW NAME SEED: write, close, stop the daemon with HOW.
drain_case() {
	local how=$1 name=$2 seed=$3 t0 pid rc size
	q_start "$LOWER" "$MNT" rate=2M
	pid=$Q_PID
	q_check "$how: 6 MiB written and closed" \
		"$QIO" create "$MNT/$name" write=ok 6M "$seed" close=ok
	t0=$(q_now)
	if [ "$how" = umount ]; then
		# A plain unmount must not look done while data is queued (the
		# daemon holds its mount busy); a lazy one detaches and the
		# daemon drains on.
		q_check "a plain umount is refused while data is queued" \
			bash -c "! umount '$MNT' 2>'$Q_TMP/umount.err'"
		q_check "  and says busy ($(cat "$Q_TMP/umount.err"))" grep -q busy "$Q_TMP/umount.err"
		q_check "umount -l returns" umount -l "$MNT"
	else
		kill -TERM "$pid"
	fi
	size=$(q_size "$LOWER/$name")
	q_log "$how: the lower file held $size bytes when the daemon was told to stop"
	q_check "$how: data was still queued then" [ "$size" -lt $((6 << 20)) ]
	q_wait_daemon "$MNT"
	secs=$(q_since "$t0")
	q_log "$how: the daemon exited $secs s later"
	q_check "$how: the mount is gone" bash -c "! awk '\$2 == \"$MNT\"' /proc/mounts | grep -q ."
	q_check "$how: every byte is in the lower file once the daemon is gone" \
		"$QIO" verify=ok "$LOWER/$name" 6M "$seed"
	q_check "$how: and no more" [ "$(q_size "$LOWER/$name")" = $((6 << 20)) ]
	q_check "$how: the drain took about 3 s ($secs s)" q_between "$secs" 2.0 4.5
	q_check "$how: the daemon printed no errors" bash -c "! grep -qi error '$Q_LOG'"
}

drain_case umount f-umount 61
drain_case SIGTERM f-sigterm 62
q_finish
