#!/bin/bash
# sync_close: close() returns only once the file's data is in the lower file
# (about 2 s for 4 MiB at rate=2M), where without the option it returns at once.
# usage: sync-close.sh SLOWMEDIA QIO
SLOWMEDIA=$1 QIO=$2
. "$(dirname "$0")/qlib.sh"
q_setup_tmpfs
q_start "$LOWER" "$MNT" rate=2M,sync_close

out=$("$QIO" create "$MNT/f" write=ok 4M 71 close=ok)
q_check "4 MiB written and closed" [ $? = 0 ]
size=$(q_size "$LOWER/f")
echo "$out" | sed 's/^/  /'
secs=$(echo "$out" | awk '$1 == "close" {sub("secs=", "", $4); print $4}')
q_check "right after close the lower file is complete ($size bytes)" \
	[ "$size" = $((4 << 20)) ]
q_check "with the written data" "$QIO" verify=ok "$LOWER/f" 4M 71
q_check "close waited for the flush (about 2 s: $secs s)" q_between "$secs" 1.3 3.0

# An overwrite of an existing file: its close waits as well.
q_check "overwrite the first MiB" "$QIO" open "$MNT/f" write=ok 1M 72 close=ok
"$QIO" gen "$Q_TMP/expect" 4M 71 >/dev/null
"$QIO" gen "$Q_TMP/head" 1M 72 >/dev/null
dd if="$Q_TMP/head" of="$Q_TMP/expect" conv=notrunc status=none
q_check "the overwrite is in the lower file after its close" cmp "$Q_TMP/expect" "$LOWER/f"

q_alive "$MNT"
q_stop "$MNT"
q_log "unmount took $Q_STOP_SECS s"
q_check "nothing was left to drain" q_between "$Q_STOP_SECS" 0 1
q_finish
