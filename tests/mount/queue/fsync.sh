#!/bin/bash
# fsync durability: with the flush rate capped, a 2 MiB write is still queued
# after close (the lower file is short); fsync returns only once every byte is
# in the lower file.
# usage: fsync.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs
q_start "$LOWER" "$MNT" rate=512K

"$QIO" gen "$Q_TMP/expect" 2M 11 >/dev/null
q_check "2 MiB written and closed" "$QIO" create "$MNT/f" write=ok 2M 11 close=ok
size=$(q_size "$LOWER/f")
q_log "lower size after close: $size"
q_check "data is queued, not yet in the lower file" [ "$size" -lt $((2 << 20)) ]

out=$("$QIO" open "$MNT/f" fsync=ok close=ok)
q_check "fsync through a second descriptor returns 0" [ $? = 0 ]
echo "$out" | sed 's/^/  /'
q_check "right after fsync the lower file has every byte" cmp "$Q_TMP/expect" "$LOWER/f"

"$QIO" gen "$Q_TMP/expect2" 1M 12 >/dev/null
out=$("$QIO" create "$MNT/g" write=ok 1M 12 fdatasync=ok)
q_check "fdatasync on the writing descriptor returns 0" [ $? = 0 ]
q_check "right after fdatasync the lower file has every byte" cmp "$Q_TMP/expect2" "$LOWER/g"

q_alive "$MNT"
q_stop "$MNT"
q_check "still complete after unmount" cmp "$Q_TMP/expect" "$LOWER/f"
q_finish
