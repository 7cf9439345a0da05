#!/bin/bash
# Read-your-writes: while data is still queued (flush rate capped), reads
# through the mount return it and stat shows the size including it, though the
# lower file is still short or still holds the old bytes.
# usage: read-your-writes.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs
# An existing file, on the medium before the mount: 1 MiB of seed 1.
"$QIO" gen "$LOWER/old" 1M 1 >/dev/null
q_start "$LOWER" "$MNT" rate=256K

# Queued: a new 2 MiB file, a 512 KiB append to the old one and a 64 KiB
# overwrite in its middle (seed 3 there).
"$QIO" gen "$Q_TMP/new.expect" 2M 2 >/dev/null
"$QIO" gen "$Q_TMP/old.expect" 1536K 1 >/dev/null
"$QIO" gen "$Q_TMP/mid" 1536K 3 >/dev/null
dd if="$Q_TMP/mid" of="$Q_TMP/old.expect" bs=64K skip=4 seek=4 count=1 conv=notrunc \
	status=none
q_check "write a new file" "$QIO" create "$MNT/new" write=ok 2M 2 close=ok
q_check "append to the old file" "$QIO" append "$MNT/old" write=ok 512K 1 close=ok
q_check "overwrite in the middle of the old file" \
	dd if="$Q_TMP/mid" of="$MNT/old" bs=64K skip=4 seek=4 count=1 conv=notrunc status=none

q_check "stat through the mount: the new file is 2 MiB" \
	[ "$(q_size "$MNT/new")" = $((2 << 20)) ]
q_check "stat through the mount: the appended file is 1.5 MiB" \
	[ "$(q_size "$MNT/old")" = $((1536 << 10)) ]
q_check "reading the new file returns the queued data" cmp "$Q_TMP/new.expect" "$MNT/new"
q_check "reading the old file returns old, appended and overwritten bytes" \
	cmp "$Q_TMP/old.expect" "$MNT/old"

lnew=$(q_size "$LOWER/new") lold=$(q_size "$LOWER/old")
q_log "lower sizes after the reads: new $lnew, old $lold"
q_check "the lower new file is still short (the reads came from the queue)" \
	[ "$lnew" -lt $((2 << 20)) ]
old_behind() {
	[ "$lold" -lt $((1536 << 10)) ] || ! cmp -s "$Q_TMP/old.expect" "$LOWER/old"
}
q_check "the lower old file is still short or stale" old_behind

# Unlinking drops the queued data: no need to wait out 2 MiB at 256K/s.
rm -f "$MNT/new"
q_check "fsync of the old file" "$QIO" open "$MNT/old" fsync=ok close=ok
q_check "the lower old file is complete after fsync" cmp "$Q_TMP/old.expect" "$LOWER/old"
q_alive "$MNT"
q_stop "$MNT"
q_check "the unlinked file is not on the lower fs" [ ! -e "$LOWER/new" ]
q_finish
