#!/bin/bash
# The medium's metadata is kept flushed: once slowmedia has written a file's
# data (O_DIRECT chunks), the lower filesystem's dirty metadata (block bitmap,
# inode, indirect blocks) is written soon too, by slowmedia's syncfs of the
# medium, instead of waiting ~30 s for the kernel's writeback to do it at any
# moment (in the middle of a read). Probe: what an explicit sync of the lower
# still has to write (ext2 always rewrites its superblock, one block). A
# control shows the probe sees such metadata: an O_DIRECT write straight to
# the lower leaves it dirty.
# usage: metadata.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"

q_setup_ext2 64
BSIZE=$(stat -f -c %S "$LOWER")

sync_writes() { # bytes an explicit sync of the lower writes now
	local s0
	s0=$(q_sectors_written "$Q_LOOP")
	sync -f "$LOWER"
	echo $((($(q_sectors_written "$Q_LOOP") - s0) * 512))
}

sync -f "$LOWER"
# Control: data written O_DIRECT, its metadata left to the kernel.
dd if=/dev/zero of="$LOWER/control" bs=1M count=4 oflag=direct status=none
sleep 3
w=$(sync_writes)
q_log "after a direct write to the lower, a sync wrote $w bytes of metadata"
q_check "control: the probe sees the lower's dirty metadata" [ "$w" -gt "$BSIZE" ]
w=$(sync_writes)
q_check "control: a second sync writes at most the superblock ($w bytes)" [ "$w" -le "$BSIZE" ]

q_start "$LOWER" "$MNT" rate=2M
q_check "write 4 MiB through slowmedia and close" \
	"$QIO" create "$MNT/f" write=ok 4M 51 close=ok
landed() {
	local i
	for ((i = 0; i < 200; i++)); do
		"$QIO" verify "$LOWER/f" 4M 51 >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}
q_check "the data reaches the lower file" landed
sleep 3
w=$(sync_writes)
q_log "3 s after the data landed, a sync wrote $w bytes"
q_check "the lower's metadata was already written (at most the superblock left)" \
	[ "$w" -le "$BSIZE" ]

q_alive "$MNT"
q_stop "$MNT"
q_finish
